#!/usr/bin/env python3
"""Issue 24's figures on NEW cases: a rerun of the audit's classes with
cases generated here (the original audit corpus is not in the repository).
Not a CTest test; run on demand:

    /usr/bin/python3 test/audit/audit_issue24.py BUILD_DIR WORKDIR [--kills N]
        [--seed S] [--asan-build DIR] [--data DIR] [--jobs J] [--only 1,2,...]

Every case ends as one of
  ok      the run did what the issue asks (refused with a message, or ran right)
  crash   killed by a signal it was not sent, or an ASan/UBSan report
  hang    still running at its timeout
  silent  exit 0 with a wrong or non-finite result, or a torn checkpoint
          (or one from the wrong step) accepted by --resume
  lost    a file that was good before the run is gone or changed
(a case with several failures counts under the first of crash, hang,
silent, lost). Classes:
  1 checkpoint atomicity: kill -9 at random times and at every
    HTP_TRAIN_CRASH_AT point of a --train --checkpoint run (fresh and
    --resume'd), and writes that fail (sh -c 'ulimit -f K; exec ...'); after
    each, FILE and FILE.optim (or .optim.prev) must be one whole pair (one
    htp.checkpoint id) of the old or a newer epoch, and --resume must train
    on to the uninterrupted run's numbers or refuse with a message;
  2 outputs naming one file: every pair of --checkpoint, --metrics, --trace,
    --output, the program, --input, --params, --weights (and the files a
    writer makes beside its output), named alike, through ./ and ../,
    symlinks (dangling too) and hard links: refused before anything is
    written, every file unchanged;
  3 non-finite loss (HTP_TRAIN_NAN_STEP) with and without --skip-nonfinite,
    tp 1 and 2, adamw and sgd;
  4 tampered .so signatures (same-length number edits, "entry", key
    letters, truncation) of small_block.mlir and a tp-2 block;
  5 NaN/Inf .npy inputs and weights (F32 and BF16) through the ASan/UBSan
    build's htp-run (skipped with a note when DIR/tools/htp-run/htp-run is
    missing);
  6 --train on models too big for this machine: refused before allocating.
Prints one line per failing case with a reproducer, then the table.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUTCOMES = ["ok", "crash", "hang", "silent", "lost"]
CLASSES = {
    1: "checkpoint atomicity (kill -9, crash points, ulimit -f)",
    2: "outputs naming one file",
    3: "non-finite loss",
    4: "tampered .so signatures",
    5: "NaN/Inf inputs under ASan/UBSan",
    6: "--train on a model too big for memory",
}
SANITIZER = re.compile(r"ERROR: (Address|Leak|Memory|Thread)Sanitizer|runtime error:|"
                       r"SUMMARY: (Address|Undefined|Leak)")

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("build")
p.add_argument("work")
p.add_argument("--kills", type=int, default=60, help="random-time kill -9 cases (class 1)")
p.add_argument("--seed", type=int, default=24)
p.add_argument("--asan-build", default=None, help="default: BUILD/../build-asan")
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
p.add_argument("--only", default="1,2,3,4,5,6")
a = p.parse_args()
BUILD = os.path.abspath(a.build)
WORK = os.path.abspath(a.work)
ASAN = os.path.abspath(a.asan_build or os.path.join(BUILD, "..", "build-asan"))
HTP_RUN = os.path.join(BUILD, "tools", "htp-run", "htp-run")
HTP_COMPILE = os.path.join(BUILD, "tools", "htp-compile", "htp-compile")
ASAN_RUN = os.path.join(ASAN, "tools", "htp-run", "htp-run")
PY = sys.executable
rng = random.Random(a.seed)
only = {int(c) for c in a.only.split(",")}
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
lock = threading.Lock()
results = []  # (class, outcome, description, reproducer, detail)
notes = []


def record(cls, failures, what, repro, detail=""):
    outcome = next((o for o in OUTCOMES[1:] if o in failures), "ok")
    with lock:
        results.append((cls, outcome, what, repro, detail))
        if outcome != "ok":
            print(f"[class {cls}] {outcome.upper()}: {what}\n    why: {failures[outcome]}\n"
                  f"    reproduce: {repro}\n    {detail[-600:]}", flush=True)


class Run:
    def __init__(self, code, out, err, hung, seconds, maxrss_kb):
        self.code, self.out, self.err, self.hung = code, out, err, hung
        self.seconds, self.maxrss_kb = seconds, maxrss_kb

    def sanitizer(self):
        return SANITIZER.search(self.err) is not None

    def tail(self):
        return (self.err or "")[-800:]


def run(cmd, env=None, timeout=120, kill_after=None, cwd=None):
    """Runs cmd; kill_after: seconds after which it is sent SIGKILL (a kill -9
    case). Returns a Run; code is -signal for a signal."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
    hung = [False]

    def timer(delay, is_hang):
        def fire():
            if proc.poll() is None:
                hung[0] = hung[0] or is_hang
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        t = threading.Timer(delay, fire)
        t.daemon = True
        t.start()
        return t
    timers = [timer(timeout, True)]
    if kill_after is not None:
        timers.append(timer(kill_after, False))
    out, err = proc.communicate()
    for t in timers:
        t.cancel()
    maxrss = 0
    try:
        maxrss = os.wait4(proc.pid, os.WNOHANG)[2].ru_maxrss
    except ChildProcessError:
        pass
    return Run(proc.returncode, out, err, hung[0], time.monotonic() - start, maxrss)


def sh(cmd, env=None):
    prefix = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + " ".join(shlex.quote(str(c)) for c in cmd)


def base_failures(r, expect_kill=False):
    """crash / hang of any run."""
    f = {}
    if r.hung:
        f["hang"] = f"no exit within its timeout ({r.seconds:.0f} s)"
    elif r.code is not None and r.code < 0 and not (expect_kill and r.code == -signal.SIGKILL):
        f["crash"] = f"killed by signal {-r.code}"
    if r.sanitizer():
        f["crash"] = "sanitizer report: " + SANITIZER.search(r.err).group(0)
    return f


# ----- safetensors ------------------------------------------------------------
def st_read(path):
    """(metadata, {name: array}) or None when path is no whole safetensors file."""
    try:
        data = open(path, "rb").read()
        n, = struct.unpack_from("<Q", data, 0)
        header = json.loads(data[8:8 + n])
        body = data[8 + n:]
        meta = header.pop("__metadata__", {})
        tensors = {}
        for name, t in header.items():
            lo, hi = t["data_offsets"]
            if hi > len(body):
                return None
            raw = body[lo:hi]
            if t["dtype"] == "F32":
                tensors[name] = np.frombuffer(raw, "<f4")
            elif t["dtype"] == "BF16":
                tensors[name] = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
        return meta, tensors
    except (OSError, ValueError, struct.error, KeyError):
        return None


def pair_state(ck):
    """('none',) no weights file; ('whole', epoch, id, finite); ('torn', why)."""
    if not os.path.exists(ck):
        return ("none",)
    w = st_read(ck)
    if w is None:
        return ("torn", f"{ck} is not a whole safetensors file")
    ident = w[0].get("htp.checkpoint")
    for suffix in (".optim", ".optim.prev"):
        o = st_read(ck + suffix)
        if o is not None and ident and o[0].get("htp.checkpoint") == ident:
            finite = all(np.isfinite(t).all() for t in list(w[1].values()) + list(o[1].values()))
            return ("whole", int(w[0].get("htp.epoch", -1)), ident, finite)
    return ("torn", f"no FILE.optim or FILE.optim.prev carries {ck}'s id {ident}")


def snapshot(folder):
    snap = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.islink(path):
            snap[name] = ("link", os.readlink(path))
        elif os.path.isfile(path):
            snap[name] = ("file", open(path, "rb").read())
        else:
            snap[name] = ("other",)
    return snap


def epochs(stdout):
    return re.findall(r"^(epoch \d+/\d+: loss [\d.]+, train acc [\d.]+%, test loss [\d.]+, "
                      r"test acc [\d.]+%)", stdout, re.M)


def parallel(cases):
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for f in [pool.submit(c) for c in cases]:
            f.result()


# ----- shared fixtures --------------------------------------------------------
if not os.access(HTP_RUN, os.X_OK):
    sys.exit(f"no {HTP_RUN}: build first (scripts/setup.sh)")
MLIR = os.path.join(WORK, "vit.mlir")
subprocess.run([PY, os.path.join(ROOT, "examples", "gen_vit.py"), "--model", "--depth", "1",
                "--dim", "16", "--heads", "2", "--mlp", "32", "--patch", "7", "--image", "28",
                "--channels", "1", "--classes", "10", "--batch", "16", "-o", MLIR], check=True)
MODEL = os.path.join(WORK, "vit.so")  # the same model compiled once: no JIT per run
subprocess.run([HTP_COMPILE, MLIR, "--entry", "vit_loss", "-o", MODEL], check=True)
MODEL2 = os.path.join(WORK, "vit-tp2.so")  # --tp 2 needs a block compiled for it
subprocess.run([HTP_COMPILE, "--tp", "2", MLIR, "--entry", "vit_loss", "-o", MODEL2], check=True)
COMMON = ["--data", a.data, "--limit-train", "64", "--limit-test", "32", "--seed", "5",
          "--schedule", "constant"]
E = 3  # epochs of the class-1 runs; 4 steps of 16 images each


def train(model=MODEL, *flags):
    return [HTP_RUN, model, "--train", *COMMON, *flags]


BASE = os.path.join(WORK, "base")
os.makedirs(BASE)
r = run(train(MODEL, "--epochs", str(E)))
WANT = epochs(r.out)
T_FULL = r.seconds
if r.code != 0 or len(WANT) != E:
    sys.exit(f"the uninterrupted run failed ({r.code}): {r.err[-1000:]}")
BASE_CK = os.path.join(BASE, "ck.safetensors")
r = run(train(MODEL, "--epochs", "1", "--checkpoint", BASE_CK))
if r.code != 0:
    sys.exit(f"the epoch-1 checkpoint failed: {r.err[-1000:]}")
PAIR_BYTES = os.path.getsize(BASE_CK) + os.path.getsize(BASE_CK + ".optim")
print(f"audit: uninterrupted {E}-epoch run {T_FULL:.1f} s; checkpoint pair {PAIR_BYTES} bytes",
      flush=True)


def folder(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def with_base(name):
    d = folder(name)
    ck = os.path.join(d, "ck.safetensors")
    shutil.copyfile(BASE_CK, ck)
    shutil.copyfile(BASE_CK + ".optim", ck + ".optim")
    return ck


# ----- class 1 ----------------------------------------------------------------
def judge_after(ck, before_epoch, failures):
    """The pair on disk after an interrupted run, then an uninterrupted
    --resume from it. before_epoch: the whole pair's epoch before (0: none)."""
    state = pair_state(ck)
    detail = f"pair after: {state[:3]}"
    if state[0] == "torn":
        failures.setdefault("lost", "the pair is torn: " + state[1])
    elif state[0] == "none" and before_epoch > 0:
        failures.setdefault("lost", f"the epoch-{before_epoch} checkpoint is gone")
    elif state[0] == "whole" and state[1] < before_epoch:
        failures.setdefault("lost", f"epoch {state[1]} replaced epoch {before_epoch}")
    elif state[0] == "whole" and not state[3]:
        failures.setdefault("silent", "non-finite values in the checkpoint")
    resume = [*train(MODEL, "--epochs", str(E), "--resume", ck, "--checkpoint", ck)]
    r = run(resume)
    for k, v in base_failures(r).items():
        failures.setdefault(k, "the resume: " + v)
    if state[0] == "whole" and state[1] < E:
        got = epochs(r.out)
        if r.code == 0 and got != WANT[state[1]:]:
            failures.setdefault("silent", f"resumed to {got}, the uninterrupted run: "
                                f"{WANT[state[1]:]}")
        elif r.code != 0:
            failures.setdefault("lost", f"a whole epoch-{state[1]} pair was refused: {r.tail()}")
    elif r.code == 0:
        failures.setdefault("silent", f"--resume of a {state[0]} pair exited 0: {r.out[-300:]}")
    elif "error" not in r.err:
        failures.setdefault("silent", f"--resume refused without a message ({r.code})")
    return detail + f"; resume exit {r.code}: {r.err.strip()[-200:]}", sh(resume)


def training(name, resumed, tp=1):
    """(checkpoint, command) of an E-epoch run writing FILE in a fresh folder,
    resumed from the epoch-1 pair there or from scratch."""
    extra = ["--tp", "2"] if tp == 2 else []
    model = MODEL2 if tp == 2 else MODEL
    if resumed:
        ck = with_base(name)
        return ck, train(model, "--epochs", str(E), "--resume", ck, "--checkpoint", ck, *extra)
    ck = os.path.join(folder(name), "ck.safetensors")
    return ck, train(model, "--epochs", str(E), "--checkpoint", ck, *extra)


def kill_case(i, resumed, delay):
    def case():
        name = f"c1-kill{i}"
        ck, cmd = training(name, resumed)
        r = run(cmd, kill_after=delay)
        f = base_failures(r, expect_kill=True)
        detail, resume = judge_after(ck, 1 if resumed else 0, f)
        record(1, f, f"kill -9 after {delay:.2f} s ({'resumed' if resumed else 'fresh'})",
               f"{sh(cmd)} & sleep {delay:.2f}; kill -9 $!; {resume}", detail)
    return case


def crash_case(k, resumed, tp):
    def case():
        name = f"c1-crash{k}-{int(resumed)}-{tp}"
        ck, cmd = training(name, resumed, tp)
        env = {"HTP_TRAIN_CRASH_AT": str(k)}
        r = run(cmd, env=env)
        f = base_failures(r, expect_kill=True)
        detail, resume = judge_after(ck, 1 if resumed else 0, f)
        record(1, f, f"HTP_TRAIN_CRASH_AT={k} ({'resumed' if resumed else 'fresh'}, tp {tp})",
               f"{sh(cmd, env)}; {resume}", detail)
    return case


def fsize_case(blocks, resumed):
    def case():
        name = f"c1-fsize{blocks}-{int(resumed)}"
        ck, cmd = training(name, resumed)
        wrapped = ["sh", "-c", f'ulimit -f {blocks}; exec "$@"', "sh", *cmd]
        r = run(wrapped)
        f = base_failures(r)
        state = pair_state(ck)
        if r.code == 0 and not (state[0] == "whole" and state[1] == E):
            f.setdefault("silent", f"exit 0 but the checkpoint is {state[:2]}")
        if r.code != 0 and not r.hung and "cannot write" not in r.err and "error" not in r.err:
            f.setdefault("silent", f"exit {r.code} without a message")
        detail, resume = judge_after(ck, 1 if resumed else 0, f)
        record(1, f, f"ulimit -f {blocks} (512-byte blocks; {'resumed' if resumed else 'fresh'})",
               f"{sh(wrapped)}; {resume}", detail)
    return case


# ----- class 2 ----------------------------------------------------------------
SMALL = os.path.join(ROOT, "examples", "small_block.mlir")


def class2_cases():
    cases = []
    # role: (flag or FILE, is output, the companions a writer makes beside it)
    train_roles = {"FILE": (0, []), "--params": (0, []),
                   "--checkpoint": (1, [".tmp", ".optim", ".optim.tmp", ".optim.prev"]),
                   "--metrics": (1, [".tmp"]), "--trace": (1, [".tmp"])}
    run_roles = {"FILE": (0, []), "--input": (0, []), "--weights": (0, []),
                 "--output": (1, []), "--output#2": (1, []), "--trace": (1, [])}
    ways = ["same", "dotted", "symlink", "hardlink", "dangling"]
    for mode, roles in (("train", train_roles), ("run", run_roles)):
        names = list(roles)
        for x in names:
            for y in names:
                if x == y or (not roles[x][0] and not roles[y][0]):
                    continue
                # x names a path; y names it (or a companion of x's) another way
                for suffix in [""] + roles[x][1]:
                    if suffix and roles[y][0] and y == "--checkpoint":
                        continue
                    for way in ways:
                        if way == "dangling" and not roles[x][0]:
                            continue  # an input exists
                        if suffix == "" and names.index(x) > names.index(y) and way == "same":
                            continue  # the same pair the other way round
                        cases.append((mode, x, y, suffix, way))
    return cases


def roles_output(role):
    return role in ("--checkpoint", "--metrics", "--trace", "--output", "--output#2")


def class2_case(n, mode, x, y, suffix, way, exists):
    def case():
        d = folder(f"c2-{n}")
        model = os.path.join(d, "model.so" if mode == "train" else "block.mlir")
        shutil.copyfile(MODEL if mode == "train" else SMALL, model)
        files = {"FILE": model}
        if mode == "train":
            files["--params"] = os.path.join(d, "params.safetensors")
            shutil.copyfile(BASE_CK, files["--params"])
            files["--checkpoint"] = os.path.join(d, "ck.safetensors")
            files["--metrics"] = os.path.join(d, "m.json")
            files["--trace"] = os.path.join(d, "t.json")
        else:
            files["--input"] = os.path.join(d, "x.npy")
            np.save(files["--input"], np.ones((2, 5, 12), np.float32))
            files["--weights"] = os.path.join(d, "w.safetensors")
            shutil.copyfile(SMALL_WEIGHTS, files["--weights"])
            files["--output"] = os.path.join(d, "y.npy")
            files["--output#2"] = os.path.join(d, "y2.npy")
            files["--trace"] = os.path.join(d, "t.json")
        target = files[x] + suffix
        # A previous good file where the output exists already (or must, for a hard link).
        if (exists or way == "hardlink") and not os.path.exists(target) and way != "dangling":
            if x == "--checkpoint" and suffix in ("", ".optim"):
                shutil.copyfile(BASE_CK, files[x])
                shutil.copyfile(BASE_CK + ".optim", files[x] + ".optim")
            else:
                open(target, "w").write('{"previous": "good"}\n')
        other = os.path.join(d, "sub")
        os.makedirs(other)
        if way == "same":
            alias = target
        elif way == "dotted":
            alias = os.path.join(other, "..", os.path.basename(target))
        elif way in ("symlink", "dangling"):
            alias = os.path.join(other, "link")
            os.symlink(target, alias)
        else:
            alias = os.path.join(other, "hard")
            os.link(target, alias)
        paths = dict(files)
        paths[y] = alias
        model = paths["FILE"]
        wanted = ["--params"] if mode == "train" else ["--input", "--weights"]
        args = []
        for role in wanted + [role for role in (x, y) if role not in wanted and role != "FILE"]:
            args += [role.split("#")[0], paths[role]]
        if mode == "train":
            cmd = [HTP_RUN, model, "--train", *COMMON, "--epochs", "1", *args]
        else:
            cmd = [HTP_RUN, model, "--iters", "1", *args]
        before = snapshot(d)
        before_sub = snapshot(other)
        r = run(cmd, timeout=120)
        f = base_failures(r)
        # --trace T writes T itself; T.tmp is no file of the run (only the
        # check that T can be written made and removed one): the run may go
        # on, but a file there before (an input, or the user's) must stay.
        probe_only = x == "--trace" and suffix == ".tmp"
        if probe_only and r.code == 0:
            pass
        elif r.code == 0:
            f.setdefault("silent", "two names of one file were accepted (exit 0)")
        elif "are the same file" not in r.err:
            f.setdefault("silent" if "error" not in r.err else "x",
                         f"refused for another reason: {r.err.strip()[-200:]}")
        after, after_sub = snapshot(d), snapshot(other)
        if after != before or after_sub != before_sub:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            changed += ["sub/" + k for k in set(before_sub) | set(after_sub)
                        if before_sub.get(k) != after_sub.get(k)]
            lost = [k for k in changed if k in before or k.split("/")[-1] in before_sub]
            if probe_only:
                # only the file there before, when it is an input, must stay
                name = os.path.basename(target)
                lost = [] if roles_output(y) or name not in before else \
                    ([name] if after.get(name) != before[name] else [])
            if lost:
                f.setdefault("lost", f"changed or removed: {lost}")
            elif not probe_only:
                f.setdefault("lost", f"written before the refusal: {changed}")
        f.pop("x", None)
        what = f"{mode}: {x}{suffix} and {y} ({way}{', existing' if exists else ''})"
        setup = f"(setup: {way} {alias} -> {target})"
        record(2, f, what, f"{sh(cmd)} {setup}", r.tail())
    return case


# ----- class 3 ----------------------------------------------------------------
def nan_case(n, step, skip, tp, optimizer, resumed):
    def case():
        d = folder(f"c3-{n}")
        ck = os.path.join(d, "ck.safetensors")
        metrics = os.path.join(d, "m.json")
        flags = ["--epochs", "2", "--checkpoint", ck, "--metrics", metrics, "--optimizer", optimizer]
        if resumed:
            r0 = run(train(MODEL, "--epochs", "1", "--checkpoint", ck, "--optimizer", optimizer))
            flags += ["--resume", ck]
        if tp == 2:
            flags += ["--tp", "2"]
        if skip:
            flags += ["--skip-nonfinite"]
        env = {"HTP_TRAIN_NAN_STEP": str(step)}
        before = snapshot(d)
        cmd = train(MODEL2 if tp == 2 else MODEL, *flags)
        r = run(cmd, env=env)
        f = base_failures(r)
        state = pair_state(ck)
        if state[0] == "whole" and not state[3]:
            f.setdefault("silent", "non-finite weights or moments written")
        if "loss nan" in r.out or "loss inf" in r.out:
            f.setdefault("silent", "an epoch reported a non-finite loss")
        if not skip:
            if r.code == 0:
                f.setdefault("silent", "a nan loss trained on with exit 0")
            elif f"iteration {step}" not in r.err:
                f.setdefault("silent", f"the error does not name step {step}: {r.tail()}")
            if resumed and snapshot(d) != before:
                f.setdefault("lost", "the previous checkpoint changed")
            first_epoch_done = step >= 4  # HTP_TRAIN_NAN_STEP counts from 0
            if not resumed and first_epoch_done and not (state[0] == "whole" and state[1] == 1):
                f.setdefault("lost", f"the epoch-1 checkpoint is {state[:2]}")
        else:
            m = None
            try:
                m = json.load(open(metrics))
            except (OSError, ValueError):
                pass
            skipped = sum(e.get("skipped_steps", 0) for e in m["epochs"]) if m else None
            if r.code != 0:
                f.setdefault("lost", f"--skip-nonfinite stopped ({r.code}): {r.tail()}")
            elif skipped != 1 or "1 step skipped" not in r.out:
                f.setdefault("silent", f"skipped steps counted {skipped}, stdout {r.out[-300:]}")
            elif not (state[0] == "whole" and state[1] == 2):
                f.setdefault("lost", f"the checkpoint after the run is {state[:2]}")
        record(3, f, f"nan at step {step}, {'--skip-nonfinite' if skip else 'no skip'}, tp {tp}, "
               f"{optimizer}{', resumed' if resumed else ''}", sh(cmd, env), r.tail())
    return case


# ----- class 4 ----------------------------------------------------------------
def signature_span(data, entry):
    # The signature is one NUL-terminated JSON object that opens with its
    # format ('{"htp_entry":2,"entry":"NAME",...').
    m = re.search(rb'\{"htp_entry":\d+,"entry":"' + re.escape(entry.encode()) + rb'"[^\x00]*\x00',
                  data)
    return (m.start(), m.end() - 1) if m else None


def tamper_cases(so, entry, label, count):
    data = open(so, "rb").read()
    span = signature_span(data, entry)
    if not span:
        notes.append(f"class 4: no signature of '{entry}' found in {so}")
        return []
    lo, hi = span
    sig = data[lo:hi]
    edits = []
    # JSON numbers only (after a colon, comma or bracket), not digits inside
    # names: a renamed tensor is metadata the facts do not carry.
    numbers = [m for m in re.finditer(rb"(?<=[:,\[])\d+", sig)]
    for m in rng.sample(numbers, min(count, len(numbers))):
        digits = m.group(0)
        i = rng.randrange(len(digits))
        d = digits[i] - 48
        choices = [c for c in range(10) if c != d and not (i == 0 and c == 0 and len(digits) > 1)]
        c = rng.choice(choices)
        kind = "shrink" if c < d else "grow"
        at = lo + m.start() + i
        edits.append((f"{label}: {kind} number '{digits.decode()}' at signature offset "
                      f"{m.start()} (digit {d}->{c})", at, bytes([48 + c])))
    em = re.search(rb'"entry":"([^"]+)"', sig)
    for _ in range(3):
        at = lo + em.start(1) + rng.randrange(len(em.group(1)))
        new = bytes([rng.choice(b"abcdefghijklmnopqrstuvwxyzXYZ_")])
        if data[at:at + 1] != new:
            edits.append((f"{label}: \"entry\" letter {data[at:at + 1].decode()}->{new.decode()}",
                          at, new))
    keys = [m for m in re.finditer(rb'"([a-z_]+)":', sig)]
    for m in rng.sample(keys, min(6, len(keys))):
        at = lo + m.start(1)
        edits.append((f"{label}: key \"{m.group(1).decode()}\" first letter -> Q", at, b"Q"))
    cases = []
    for k, (what, at, new) in enumerate(edits):
        out = os.path.join(WORK, "c4", f"{label}-{k}.so")
        edited = bytearray(data)
        edited[at:at + len(new)] = new
        open(out, "wb").write(edited)
        cases.append((what, out))
    for k, frac in enumerate([0.0, 0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, None, None, None]):
        cut = rng.randrange(len(data)) if frac is None else int(len(data) * frac)
        out = os.path.join(WORK, "c4", f"{label}-cut{k}.so")
        open(out, "wb").write(data[:cut])
        cases.append((f"{label}: truncated to {cut} of {len(data)} bytes", out))
    for cut in (hi, lo + (hi - lo) // 2):
        out = os.path.join(WORK, "c4", f"{label}-cutsig{cut}.so")
        open(out, "wb").write(data[:cut])
        cases.append((f"{label}: truncated inside/after its signature at {cut}", out))
    return cases


def tamper_case(what, so, baseline, runner):
    def case():
        y = so + ".y.npy"
        cmd = [runner, so, "--iters", "1", "--output", y]
        env = {"ASAN_OPTIONS": "detect_leaks=0"} if runner == ASAN_RUN else {}
        r = run(cmd, env=env, timeout=120)
        f = base_failures(r)
        if r.code == 0:
            same = False
            try:
                same = np.array_equal(np.load(y), baseline)
            except (OSError, ValueError):
                pass
            f.setdefault("silent", "the tampered block ran (exit 0)" +
                         (" with the untouched output" if same else " with another output"))
        elif r.code > 0 and "error" not in r.err:
            f.setdefault("silent", f"exit {r.code} without a message")
        record(4, f, what + (" [ASan htp-run]" if runner == ASAN_RUN else ""), sh(cmd, env),
               r.tail())
    return case


# ----- class 5 ----------------------------------------------------------------
SPECIAL = {"nan": np.float32("nan"), "inf": np.float32("inf"), "-inf": np.float32("-inf")}


def poisoned(shape, pattern, r):
    x = r.standard_normal(shape).astype(np.float32)
    if pattern in SPECIAL:
        x[...] = SPECIAL[pattern]
    elif pattern == "mixed":
        mask = r.random(shape)
        x[mask < 0.1] = np.nan
        x[(mask >= 0.1) & (mask < 0.2)] = np.inf
        x[(mask >= 0.2) & (mask < 0.3)] = -np.inf
    elif pattern == "huge":
        x *= np.float32(3e38)
    elif pattern == "one-nan":
        x.flat[r.integers(x.size)] = np.nan
    elif pattern == "denormal":
        x *= np.float32(1e-42)
    elif pattern == "large-neg":
        x = -np.abs(x) * np.float32(1e4)
    return x


def write_weights(path, tensors, dtype, meta=None):
    header, body, off = {}, b"", 0
    for name, (shape, values) in tensors.items():
        if dtype == "BF16":
            raw = (values.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            raw = values.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        body += raw
        off += len(raw)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + body)


def weight_shapes(so_path, entry):
    data = open(so_path, "rb").read()
    lo, hi = signature_span(data, entry)
    sig = json.loads(data[lo:hi])
    args = sig.get("args") or sig.get("arguments") or []
    params, inputs = {}, {}
    for t in args:
        shape = t.get("global_shape") or t.get("shape")
        (params if t.get("role") == "param" else inputs)[t["name"]] = shape
    return params, inputs


def nan_input_case(n, so, entry, pattern, wpattern, dtype, tp_flags):
    def case():
        r_ = np.random.default_rng(n)
        d = folder(f"c5-{n}")
        params, inputs = weight_shapes(so, entry)
        cmd = [ASAN_RUN, so, "--iters", "1", *tp_flags]
        for name, shape in inputs.items():
            path = os.path.join(d, name + ".npy")
            np.save(path, poisoned(shape, pattern, r_))
            cmd += ["--input", path]
        w = os.path.join(d, "w.safetensors")
        write_weights(w, {k: (s, poisoned(s, wpattern, r_) * np.float32(0.05)
                              if wpattern != "finite" else r_.standard_normal(s).astype(np.float32)
                              * np.float32(0.05)) for k, s in params.items()}, dtype)
        cmd += ["--weights", w, "--output", os.path.join(d, "y.npy")]
        env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
        r = run(cmd, env=env, timeout=180)
        f = base_failures(r)
        if r.code not in (0, 1) and "crash" not in f and "hang" not in f:
            f["crash"] = f"exit {r.code}"
        if r.code == 0 and pattern == "finite" and wpattern == "finite":
            y = np.load(os.path.join(d, "y.npy"))
            if not np.isfinite(y).all():
                f.setdefault("silent", "finite data gave a non-finite output")
        record(5, f, f"{os.path.basename(so)}: input {pattern}, {dtype} weights {wpattern} "
               f"{' '.join(tp_flags)}", sh(cmd, env), r.tail())
    return case


# ----- class 6 ----------------------------------------------------------------
def huge_case(n, depth, dim, heads, mlp, batch, tp):
    def case():
        d = folder(f"c6-{n}")
        m = os.path.join(d, "huge.mlir")
        subprocess.run([PY, os.path.join(ROOT, "examples", "gen_vit.py"), "--model", "--depth",
                        str(depth), "--dim", str(dim), "--heads", str(heads), "--mlp", str(mlp),
                        "--patch", "7", "--image", "28", "--channels", "1", "--classes", "10",
                        "--batch", str(batch), "-o", m], check=True)
        cmd = [HTP_RUN, m, "--train", "--data", a.data, "--epochs", "1", "--limit-train",
               str(batch), "--limit-test", "16", "--tp", str(tp)]
        r = run(cmd, timeout=120)
        f = base_failures(r)
        if r.code == 0:
            f.setdefault("silent", "trained a model bigger than the machine")
        elif "refused before allocating anything" not in r.err:
            f.setdefault("crash" if r.code < 0 else "silent",
                         f"not refused before allocating ({r.code}): {r.tail()}")
        if r.maxrss_kb > 2 * 1024 * 1024:
            f.setdefault("crash", f"peak RSS {r.maxrss_kb / 1e6:.1f} GB before the refusal")
        record(6, f, f"depth {depth} dim {dim} mlp {mlp} batch {batch} tp {tp} "
               f"({r.seconds:.1f} s, peak RSS {r.maxrss_kb / 1024:.0f} MB)", sh(cmd), r.tail())
    return case


# ----- the run ----------------------------------------------------------------
started = time.time()
if 1 in only:
    cases = []
    for i in range(a.kills):
        resumed = i % 2 == 1
        span = T_FULL * (2 / 3 if resumed else 1)
        cases.append(kill_case(i, resumed, rng.uniform(0.02, 1.05) * span))
    for resumed in (False, True):
        for k in range(1, 6 * (E - resumed) + 1):
            cases.append(crash_case(k, resumed, 1))
    for k in range(1, 7):
        cases.append(crash_case(rng.randrange(1, 6 * E + 1), False, 2))
    top = PAIR_BYTES // 512 + 4
    for _ in range(16):
        cases.append(fsize_case(rng.randrange(1, top), rng.random() < 0.5))
    parallel(cases)
    print(f"audit: class 1 done ({time.time() - started:.0f} s)", flush=True)

if 2 in only or 5 in only or 4 in only:
    SMALL_WEIGHTS = os.path.join(WORK, "small.safetensors")
    subprocess.run([PY, os.path.join(ROOT, "test", "ref", "make_data.py"), "weights",
                    SMALL_WEIGHTS, "--depth", "1", "--dim", "12", "--mlp", "20"], check=True)
if 2 in only:
    cases = [class2_case(n, *c, rng.random() < 0.5) for n, c in enumerate(class2_cases())]
    parallel(cases)
    print(f"audit: class 2 done ({time.time() - started:.0f} s)", flush=True)

if 3 in only:
    cases = []
    n = 0
    for skip in (False, True):
        for tp in (1, 2):
            for optimizer in ("adamw", "sgd"):
                for resumed in (False, True):
                    step = rng.randrange(4 if resumed else 0, 8)  # 0-based, 4 an epoch
                    cases.append(nan_case(n, step, skip, tp, optimizer, resumed))
                    n += 1
    parallel(cases)
    print(f"audit: class 3 done ({time.time() - started:.0f} s)", flush=True)

if 4 in only or 5 in only:
    os.makedirs(os.path.join(WORK, "c4"), exist_ok=True)
    SMALL_SO = os.path.join(WORK, "c4", "small.so")
    subprocess.run([HTP_COMPILE, SMALL, "-o", SMALL_SO], check=True)
    SPLIT_MLIR = os.path.join(WORK, "c4", "split.mlir")
    subprocess.run([PY, os.path.join(ROOT, "examples", "gen_vit.py"), "--depth", "1", "--dim",
                    "24", "--heads", "2", "--mlp", "40", "--tokens", "5", "--batch", "2", "-o",
                    SPLIT_MLIR], check=True)
    SPLIT_SO = os.path.join(WORK, "c4", "split.so")
    subprocess.run([HTP_COMPILE, "--tp", "2", SPLIT_MLIR, "-o", SPLIT_SO], check=True)
    BF16_MLIR = os.path.join(WORK, "c4", "bf16.mlir")
    subprocess.run([PY, os.path.join(ROOT, "examples", "gen_vit.py"), "--dtype", "bf16",
                    "--depth", "1", "--dim", "48", "--heads", "4", "--mlp", "96", "--tokens", "9",
                    "--batch", "2", "-o", BF16_MLIR], check=True)
    BF16_SO = os.path.join(WORK, "c4", "bf16.so")
    subprocess.run([HTP_COMPILE, BF16_MLIR, "-o", BF16_SO], check=True)


def entry_of(so):
    m = re.search(rb'\{"htp_entry":\d+,"entry":"([^"]+)"', open(so, "rb").read())
    return m.group(1).decode()


if 4 in only:
    cases = []
    for so, label, count in ((SMALL_SO, "small", 40), (SPLIT_SO, "tp2", 40)):
        y = so + ".y.npy"
        r = run([HTP_RUN, so, "--iters", "1", "--output", y])
        if r.code != 0:
            sys.exit(f"the untouched {so} does not run: {r.err[-500:]}")
        baseline = np.load(y)
        for k, (what, out) in enumerate(tamper_cases(so, entry_of(so), label, count)):
            cases.append(tamper_case(what, out, baseline, HTP_RUN))
            if os.access(ASAN_RUN, os.X_OK) and k % 3 == 0:
                cases.append(tamper_case(what, out, baseline, ASAN_RUN))
    parallel(cases)
    print(f"audit: class 4 done ({time.time() - started:.0f} s)", flush=True)

if 5 in only:
    if not os.access(ASAN_RUN, os.X_OK):
        notes.append(f"class 5 skipped: no ASan/UBSan htp-run at {ASAN_RUN} (configure it as "
                     "scripts/test.sh does: BUILD_DIR=build-asan CMAKE_ARGS=\"-DHTP_ENABLE_MLIR=OFF "
                     "-DHTP_SANITIZE=ON -DHTP_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug\" "
                     "scripts/setup.sh)")
    else:
        cases = []
        n = 0
        patterns = ["nan", "inf", "-inf", "mixed", "huge", "one-nan", "denormal", "large-neg",
                    "finite"]
        for so, dtypes, tp_flags in ((SMALL_SO, ("F32", "BF16"), []), (SPLIT_SO, ("F32",), []),
                                     (BF16_SO, ("BF16", "F32"), [])):
            entry = entry_of(so)
            for pattern in patterns:
                for dtype in dtypes:
                    wpattern = rng.choice(["finite", "nan", "inf", "-inf", "mixed", "one-nan"])
                    cases.append(nan_input_case(n, so, entry, pattern, wpattern, dtype, tp_flags))
                    n += 1
        parallel(cases)
    print(f"audit: class 5 done ({time.time() - started:.0f} s)", flush=True)

if 6 in only:
    configs = [(8, 4096, 32, 16384, 32768, 1), (1, 1024, 8, 4096, 60000, 1),
               (24, 8192, 64, 32768, 16, 1), (4, 2048, 16, 8192, 20000, 2),
               (64, 4096, 32, 16384, 64, 2), (2, 512, 8, 2048, 60000, 1)]
    for n, c in enumerate(configs):
        huge_case(n, *c)()
    print(f"audit: class 6 done ({time.time() - started:.0f} s)", flush=True)

# ----- the table --------------------------------------------------------------
print()
print("| class | cases | ok | crash | hang | silent wrong | data lost |")
print("|---|---:|---:|---:|---:|---:|---:|")
totals = {o: 0 for o in OUTCOMES}
for cls in sorted(only):
    rows = [r for r in results if r[0] == cls]
    counts = {o: sum(1 for r in rows if r[1] == o) for o in OUTCOMES}
    for o in OUTCOMES:
        totals[o] += counts[o]
    print(f"| {cls}. {CLASSES[cls]} | {len(rows)} | " + " | ".join(str(counts[o]) for o in OUTCOMES)
          + " |")
print(f"| all | {len(results)} | " + " | ".join(str(totals[o]) for o in OUTCOMES) + " |")
for note in notes:
    print("note:", note)
print(f"audit: {len(results)} cases in {time.time() - started:.0f} s")
sys.exit(1 if any(r[1] != "ok" for r in results) else 0)

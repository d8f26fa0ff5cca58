#!/usr/bin/env python3
"""A checkpoint is one unit (DESIGN §13), whatever fails or is killed when:
  - kill -9 at every step of committing a checkpoint (before each write and
    rename: HTP_TRAIN_CRASH_AT=K), in the first and in a later checkpoint;
    then --resume either finds no checkpoint (killed before the first one
    committed) or trains on, printing exactly the uninterrupted run's later
    epochs, so it found a pair from one step, never new weights beside old
    moments;
  - a write that fails half way (the file size limit, as a full disk): the
    run stops with an error naming the file, and the previous checkpoint
    still resumes to the uninterrupted run's numbers;
  - a pair that does not belong together (FILE.optim from another epoch) is
    refused with a message that says what each file holds;
  - outputs that name one file (--metrics and --checkpoint, --checkpoint and
    the program, --trace and --checkpoint's moments, through a symlink) are
    refused before anything runs, and the files are untouched.
usage: check_checkpoint.py HTP_RUN WORKDIR [DATA_DIR]"""
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
htp_run, work = sys.argv[1:3]
data = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
os.makedirs(work, exist_ok=True)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


mlir = os.path.join(work, "vit.mlir")
subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), "--model",
                "--depth", "1", "--dim", "16", "--heads", "2", "--mlp", "32", "--patch", "7",
                "--image", "28", "--channels", "1", "--classes", "10", "--batch", "16",
                "-o", mlir], check=True)
# A constant learning rate: a run of 1 epoch then resumed goes where one of
# 3 goes (the cosine schedule depends on --epochs).
COMMON = ["--limit-train", "64", "--limit-test", "32", "--seed", "5", "--schedule", "constant"]
POINTS = 6  # crash points per checkpoint commit (train.c commit_checkpoint)


def run(*flags, env=None, limit=None):
    def preexec():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    result = subprocess.run([htp_run, mlir, "--train", "--data", data, *COMMON, *flags],
                            capture_output=True, text=True, env={**os.environ, **(env or {})},
                            preexec_fn=preexec)
    return result.returncode, result.stdout, result.stderr


def epochs(stdout):
    return re.findall(r"^(epoch \d+/\d+: loss [\d.]+, train acc [\d.]+%, test loss [\d.]+, "
                      r"test acc [\d.]+%)", stdout, re.M)


def fresh(name):
    folder = os.path.join(work, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return os.path.join(folder, "ck.safetensors")


code, out, err = run("--epochs", "3")
want = epochs(out)
check(code == 0 and len(want) == 3, f"the uninterrupted run ({code}): {err[-1000:]}")

# kill -9 at every step of the first two commits.
for k in range(1, 2 * POINTS + 1):
    ck = fresh(f"kill{k}")
    code, out, err = run("--epochs", "3", "--checkpoint", ck, env={"HTP_TRAIN_CRASH_AT": str(k)})
    check(code == -signal.SIGKILL, f"kill at step {k}: exit {code}, not SIGKILL: {err[-500:]}")
    # Killed in commit c (0, 1) at its point p: committed once p passed the
    # rename of the weights (the fifth point).
    c, p = divmod(k - 1, POINTS)
    done = c + (1 if p + 1 > 5 else 0)
    code, out, err = run("--epochs", "3", "--resume", ck, "--checkpoint", ck)
    if done == 0:
        check(code != 0 and ("cannot open" in err.lower() or "no such file" in err.lower()),
              f"kill at step {k} before the first commit: resume gave {code}: {err[-500:]}")
        continue
    got = epochs(out)
    check(code == 0 and got == [e.replace("/3", "/3") for e in want[done:]],
          f"kill at step {k} ({done} epoch(s) committed): resumed {got}, want {want[done:]} "
          f"({err[-500:]})")
    leftovers = sorted(os.listdir(os.path.dirname(ck)))
    check(leftovers == ["ck.safetensors", "ck.safetensors.optim"],
          f"kill at step {k}: after the resumed run's own commits the folder holds {leftovers}")

# A write that fails half way: a file size limit between the weights' size
# and the moments' (AdamW: twice the weights).
ck = fresh("full")
code, out, err = run("--epochs", "1", "--checkpoint", ck)
check(code == 0, f"the first epoch ({code}): {err[-500:]}")
limit = os.path.getsize(ck) + 4096
before = {name: open(os.path.join(os.path.dirname(ck), name), "rb").read()
          for name in os.listdir(os.path.dirname(ck))}
code, out, err = run("--epochs", "2", "--resume", ck, "--checkpoint", ck, limit=limit)
check(code != 0 and "cannot write" in err and ".optim.tmp" in err,
      f"a write past the size limit: exit {code}: {err[-800:]}")
after = {name: open(os.path.join(os.path.dirname(ck), name), "rb").read()
         for name in os.listdir(os.path.dirname(ck))}
check(after == before, f"the failed commit changed the folder: {sorted(before)} -> {sorted(after)}")
code, out, err = run("--epochs", "3", "--resume", ck)
check(code == 0 and epochs(out) == want[1:],
      f"resumed after the failed write: {epochs(out)}, want {want[1:]} ({err[-500:]})")

# A resume with the checkpoint's settings says nothing; with others, each
# one that differs is noted (not refused).
code, out, err = run("--epochs", "3", "--resume", ck)
check(code == 0 and "note: --resume" not in err, f"a resume with the same settings: {err[-400:]}")
code, out, err = run("--epochs", "3", "--resume", ck, "--lr", "0.01", "--weight-decay", "0.1")
check(code == 0 and "was trained with --lr 0.001; this run has 0.01," in err and
      "was trained with --weight-decay 0.05; this run has 0.1," in err and "--schedule" not in err,
      f"a resume with another --lr and --weight-decay ({code}): {err[-600:]}")

# Moments training could not have written (a NaN, a negative second
# moment) are named in the .optim file, before any step.
for value, moment in ((float("nan"), "m."), (-1.0, "v.")):
    bad = fresh(f"moment-{moment[0]}")
    shutil.copyfile(ck, bad)
    shutil.copyfile(ck + ".optim", bad + ".optim")
    with open(bad + ".optim", "r+b") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(length))
        name = next(k for k in header if k.startswith(moment))
        f.seek(8 + length + header[name]["data_offsets"][0])
        f.write(struct.pack("<f", value))
    code, out, err = run("--epochs", "3", "--resume", bad)
    check(code != 0 and ".optim" in err and f"'{name}' holds" in err and not epochs(out),
          f"a {moment} moment of {value} resumed ({code}): {err[-500:]}")

# A pair from two steps: epoch 1's moments beside epoch 2's weights.
one, two = fresh("one"), fresh("two")
run("--epochs", "1", "--checkpoint", one)
run("--epochs", "2", "--checkpoint", two)
shutil.copyfile(one + ".optim", two + ".optim")
code, out, err = run("--epochs", "3", "--resume", two)
check(code != 0 and "does not belong to its weights" in err and "epoch 1" in err and
      "epoch 2" in err, f"a torn pair resumed ({code}): {err[-800:]}")

# Outputs that name one file, as files: refused before anything is written.
ck = fresh("paths")
metrics = os.path.join(os.path.dirname(ck), "m.json")
link = os.path.join(os.path.dirname(ck), "link.json")
os.symlink(ck, link)
program = open(mlir).read()
cases = [
    (["--checkpoint", ck, "--metrics", ck], "--metrics"),
    (["--checkpoint", mlir], "FILE"),
    (["--checkpoint", ck, "--trace", ck + ".optim"], "--trace"),
    (["--checkpoint", ck, "--metrics", link], "--metrics"),
    (["--checkpoint", ck, "--metrics", ck + ".tmp"], "--metrics"),
    (["--metrics", metrics, "--trace", "./" + os.path.relpath(metrics)], "--trace"),
    # One file in two roles of the checkpoint pair: the moments --resume X
    # reads would be written over with weights (it was taken as a resume
    # in place, exit 0).
    (["--resume", ck, "--checkpoint", ck + ".optim"], "--resume"),
    (["--resume", ck + ".optim", "--checkpoint", ck], "--resume"),
]
for flags, name in cases:
    code, out, err = run("--epochs", "1", *flags)
    check(code != 0 and "are the same file" in err and name in err,
          f"{flags}: exit {code}: {err[-400:]}")
check(open(mlir).read() == program, "the program was overwritten")
# The data set's files are inputs: an output naming one (here through a
# folder of symlinks to them, so that a regression replaces a link, not the
# data set) is refused.
linked = os.path.join(os.path.dirname(ck), "data")
os.makedirs(linked)
for name in os.listdir(data):
    os.symlink(os.path.abspath(os.path.join(data, name)), os.path.join(linked, name))
for flag in ("--checkpoint", "--metrics"):
    target = os.path.join(linked, "train-labels-idx1-ubyte.gz")
    result = subprocess.run([htp_run, mlir, "--train", "--data", linked, *COMMON, "--epochs", "1",
                             flag, target], capture_output=True, text=True)
    check(result.returncode == 2 and "--data" in result.stderr and
          "are the same file" in result.stderr and os.path.islink(target),
          f"{flag} over a data file: exit {result.returncode}: {result.stderr[-400:]}")
shutil.rmtree(linked)
check(sorted(os.listdir(os.path.dirname(ck))) == ["link.json"],
      f"a refused run wrote {sorted(os.listdir(os.path.dirname(ck)))}")
# --trace T is written as T.tmp, then renamed: a run that reads T.tmp (here
# its own --params) is refused before anything is written, and the file
# stays as it was.
params = os.path.join(os.path.dirname(ck), "t.json.tmp")
shutil.copyfile(os.path.join(work, "one", "ck.safetensors"), params)
kept = open(params, "rb").read()
code, out, err = run("--epochs", "1", "--params", params, "--trace",
                     os.path.join(os.path.dirname(ck), "t.json"))
check(code == 2 and "are the same file" in err and open(params, "rb").read() == kept,
      f"--trace T beside --params T.tmp (exit {code}): {err[-400:]}")
code, out, err = run("--epochs", "1", "--checkpoint", ck, "--resume", ck)
check("are the same file" not in err, f"--resume X --checkpoint X was refused: {err[-400:]}")

# Temporaries found in place (a stale one, or a symlink someone planted):
# each writer makes its own new file, never writing through the name.
ck = fresh("planted")
folder = os.path.dirname(ck)
victim = os.path.join(folder, "victim.txt")
with open(victim, "w") as f:
    f.write("someone's file")
metrics = os.path.join(folder, "m.json")
for name in ["ck.safetensors.tmp", "ck.safetensors.optim.tmp", "m.json.tmp"]:
    os.symlink(victim, os.path.join(folder, name))
code, out, err = run("--epochs", "1", "--checkpoint", ck, "--metrics", metrics)
check(code == 0 and open(victim).read() == "someone's file",
      f"a planted temporary was written through (exit {code}): {err[-400:]}")
check(sorted(os.listdir(folder)) == ["ck.safetensors", "ck.safetensors.optim", "m.json",
                                     "victim.txt"] and
      not any(os.path.islink(os.path.join(folder, n)) for n in os.listdir(folder)),
      f"after planted temporaries the folder holds {sorted(os.listdir(folder))}")

print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)

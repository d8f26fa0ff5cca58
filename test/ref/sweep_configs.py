#!/usr/bin/env python3
"""Random configurations of whole runs against the float64 NumPy references.

Each sample draws one configuration a user could ask for and runs the
matching checker on it:

  block  check_e2e.py: a ViT encoder (depth, width, heads, MLP width,
         tokens, batch, GELU, eps drawn; head widths and token counts on
         both sides of the kernels' path limits, widths from 4: MIN_DIM) at --tp 1..4, even or by
         shares, with or without spare room, f32 or bf16, a matmul
         precision (bf16, one block), a policy with a straggler (exact ones only: none,
         migrate, semi with a migrating factor), the checked device, a
         .so from htp-compile, oneDNN's ISA capped (which caps htp's own
         kernels too), element by element against vit_ref.py
  grad   timm_vit_check.py --without-torch --grads: a whole ViT with a
         loss, its logits, loss and every parameter's gradient through
         htp-run against vit_train_ref.py, at --tp 1..3

A sample whose split the compiler refuses with its clear message ("cannot
be split ...") is counted as refused, not failed: that is the documented
answer for those shapes. A sample whose checker says its own negative
control could not tell a wrong model (a draw too small for the perturbation
to show) is counted as weak, not failed. Any other FAIL, a crash, or a
checker's timeout fails the sweep, and each failure prints the command that
reproduces it.

    sweep_configs.py --htp-run H --htp-compile C --gen G --workdir W
                     [--seed S] [--count N] [--seconds T] [--jobs J]
                     [--kinds block,grad]

The draws are a function of --seed and the sample's index, so a failure's
seed and index (printed) redraw it alone: --seed S --first I --count 1.
"""
import argparse
import concurrent.futures
import os
import random
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Head widths and token counts around the CPU kernels' path limits: the
# small-head products (<= 32), the 16-wide tiles, odd widths.
HEAD_DIMS = [1, 2, 3, 5, 8, 12, 15, 16, 17, 24, 31, 32, 33, 40, 48, 64]
TOKENS = [1, 2, 3, 5, 9, 15, 16, 17, 31, 32, 33, 47, 50, 64, 65]
ISAS = [None, None, None, "AVX2", "AVX512_CORE", "AVX512_CORE_BF16"]
# A layer norm over 2 or 3 channels is ill-conditioned past any fixed
# round-off bound (two values close together cancel in x - mean): htp-run
# at 1.5 times the f32 bound where NumPy float32 happened to round well
# (1000-sample sweeps, seeds 2 to 7). Widths from 4 up.
MIN_DIM = 4
CHECK_TIMEOUT = 300


def draw_shares(rng, tp):
    if tp == 1 or rng.random() < 0.6:
        return None
    return ",".join(str(rng.randint(1, 3)) for _ in range(tp))


def block_sample(rng, a):
    """One block configuration: (check_e2e.py, its arguments, the ISA cap or None)."""
    tp = rng.choice([1, 1, 2, 2, 3, 4])
    shares = draw_shares(rng, tp)
    heads = tp * rng.randint(1, 3) if shares is None else rng.randint(tp, 3 * tp)
    head_dim = rng.choice(HEAD_DIMS)
    while heads * head_dim < MIN_DIM:
        head_dim = rng.choice(HEAD_DIMS)
    dim = heads * head_dim
    mlp_units = rng.randint(1, 8)
    mlp = (tp if shares is None else 1) * rng.choice([1, 2, 3, 4, 5, 7, 16]) * mlp_units
    depth = rng.randint(1, 3)
    args = ["--depth", str(depth), "--dim", str(dim), "--heads", str(heads),
            "--mlp", str(mlp), "--tokens", str(rng.choice(TOKENS)),
            "--batch", str(rng.randint(1, 4)), "--gelu", rng.choice(["none", "tanh"]),
            "--eps", rng.choice(["1e-6", "1e-5"]), "--seed", str(rng.randint(1, 10**6)),
            "--tp", str(tp)]
    if shares:
        args += ["--shares", shares]
    if tp > 1 and rng.random() < 0.25:
        args += ["--spare", str(rng.choice([25, 50, 100]))]
    # bf16 is held to a max-relative bound that assumes a well-conditioned
    # block: a layer norm over fewer than 8 channels amplifies the outputs'
    # roundings past it (dim 3: 3.0e-2 at tp 1, where the bound is 3e-2).
    dtype = "bf16" if dim >= 8 and rng.random() < 0.3 else "f32"
    if dtype == "bf16":
        args += ["--dtype", "bf16"]
        if rng.random() < 0.3:
            args += ["--weights-dtype", "F32"]
    elif depth == 1 and rng.random() < 0.3:
        # The rounded reference agrees only statistically: an operand within
        # f32 round-off of a rounding boundary rounds an ulp apart in htp and
        # NumPy. So one block (block after block, the softmax amplifies such
        # an ulp until the rounded reference is no nearer than the exact
        # one) and bf16 only (at TF32's small deviation from the exact
        # result one such element can decide the verdict);
        # matmul-precision.test and test_precision.c hold TF32.
        args += ["--matmul-precision", "bf16"]
    extra = []
    if tp > 1 and rng.random() < 0.5:
        policy = rng.choice(["none", "migrate", "semi"])
        slow = rng.randrange(tp)
        # semi migrates a deficit above its resize limit (0.25): a factor of
        # 4 or more is 0.75, so its plans stay exact.
        extra += ["--policy", policy, "--slow", f"{slow}:{rng.choice([4, 6, 10])}",
                  "--iters", str(rng.choice([6, 9]))]
    if rng.random() < 0.2:
        extra += ["--device", "checked"]
    if extra:
        args += ["--extra", " ".join(extra)]
    if rng.random() < 0.15:
        args += ["--so", a.htp_compile]
    isa = rng.choice(ISAS)
    return (os.path.join(HERE, "check_e2e.py"),
            ["--htp-run", a.htp_run, "--gen", a.gen] + args, isa)


def grad_sample(rng, a):
    """One whole-model gradient configuration, as block_sample's."""
    tp = rng.choice([1, 1, 2, 3])
    heads = tp * rng.randint(1, 3)
    head_dim = rng.choice([2, 3, 5, 8, 12, 16, 17, 32, 33])
    while heads * head_dim < MIN_DIM:
        head_dim = rng.choice([2, 3, 5, 8, 12, 16, 17, 32, 33])
    patch = rng.choice([2, 3, 4, 5, 7])
    image = patch * rng.randint(1, 5)
    mlp = tp * rng.randint(1, 12)
    args = ["--grads", "--without-torch", "--depth", str(rng.randint(1, 2)),
            "--dim", str(heads * head_dim), "--heads", str(heads), "--mlp", str(mlp),
            "--patch", str(patch), "--image", str(image),
            "--channels", str(rng.choice([1, 3])), "--classes", str(rng.randint(2, 11)),
            "--batch", str(rng.randint(1, 5)), "--gelu", rng.choice(["none", "tanh"]),
            "--eps", rng.choice(["1e-6", "1e-5"]), "--seed", str(rng.randint(1, 10**6)),
            "--tp", str(tp)]
    # No --matmul-precision: per gradient, its rounded reference is sharp only
    # on chosen models (timm_vit_check.add_reduced); matmul-precision.test
    # holds it there.
    if rng.random() < 0.2:
        args += ["--extra", "--device checked"]
    return (os.path.join(HERE, "timm_vit_check.py"), ["--htp-run", a.htp_run] + args,
            rng.choice(ISAS))


def draw(a, index):
    rng = random.Random(f"{a.seed}:{index}")
    kind = rng.choice(a.kinds)
    script, args, isa = (block_sample if kind == "block" else grad_sample)(rng, a)
    return kind, script, args, isa


def run_one(a, index):
    kind, script, args, isa = draw(a, index)
    workdir = os.path.join(a.workdir, f"s{index}")
    argv = [sys.executable, script] + args + ["--workdir", workdir]
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    command = (f"ONEDNN_MAX_CPU_ISA={isa} " if isa else "") + shlex.join(argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env,
                              timeout=CHECK_TIMEOUT)
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        text, code = f"timed out after {CHECK_TIMEOUT} s", -1
    if code == 0 and "PASS" in text and "FAIL" not in text:
        outcome = "pass"
    elif "cannot be split" in text:
        outcome = "refused"
    elif weak_control(text):
        outcome = "weak"
    else:
        outcome = "fail"
    return index, kind, outcome, command, text


def weak_control(text):
    """A FAIL only because a negative control could not tell a wrong model,
    the results themselves within their bounds: check_e2e.py's "does NOT
    fail the bound" with its first figure <= 1, or timm_vit_check.py's
    failing rows all negative controls (beside its closing "FAIL:" line)."""
    if "does NOT fail the bound" in text:
        lines = [line for line in text.splitlines() if "FAIL" in line]
        for line in lines:
            match = re.search(r"max_i \|y - ref\|_i / bound_i = ([0-9.e+-]+)", line)
            if not match or float(match.group(1)) > 1:
                return False
        return bool(lines)
    rows = [line for line in text.splitlines() if line.startswith("FAIL ")]
    return bool(rows) and all("negative control" in row for row in rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--htp-run", required=True)
    parser.add_argument("--htp-compile", required=True)
    parser.add_argument("--gen", required=True, help="examples/gen_vit.py")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--first", type=int, default=0, help="the first sample's index")
    parser.add_argument("--count", type=int, default=20, help="samples at most")
    parser.add_argument("--seconds", type=float, default=0,
                        help="start no sample after this many seconds (0: no limit)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--kinds", default="block,grad")
    parser.add_argument("--keep", action="store_true", help="keep passing samples' files")
    a = parser.parse_args()
    a.kinds = a.kinds.split(",")
    if any(kind not in ("block", "grad") for kind in a.kinds) or a.count < 1 or a.jobs < 1:
        parser.error("--kinds takes block and grad; --count and --jobs at least 1")
    os.makedirs(a.workdir, exist_ok=True)

    start = time.monotonic()
    counts = {"pass": 0, "refused": 0, "weak": 0, "fail": 0}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        pending, index, end = set(), a.first, a.first + a.count
        while pending or index < end:
            while (index < end and len(pending) < a.jobs and
                   (a.seconds <= 0 or time.monotonic() - start < a.seconds)):
                pending.add(pool.submit(run_one, a, index))
                index += 1
            if not pending:
                break
            done, pending = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                i, kind, outcome, command, text = future.result()
                counts[outcome] += 1
                if outcome == "fail":
                    print(f"FAIL sample {i} ({kind}, --seed {a.seed} --first {i}):\n"
                          f"  {command}\n" + "".join(f"  | {line}\n"
                                                      for line in text.splitlines()[-12:]),
                          flush=True)
                elif outcome == "pass" and not a.keep:
                    subprocess.run(["rm", "-rf", os.path.join(a.workdir, f"s{i}")])
    total = sum(counts.values())
    print(f"sweep: {total} samples, {counts['pass']} passed, {counts['fail']} failed, "
          f"{counts['refused']} refused by the split, {counts['weak']} with a weak control "
          f"(seed {a.seed}, {time.monotonic() - start:.0f} s)")
    return 1 if counts["fail"] or counts["pass"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

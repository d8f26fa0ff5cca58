#!/usr/bin/env python3
"""htp-run --train on a whole ViT from examples/gen_vit.py --model (its
backward written by htp-grad), on a slice of the real Fashion-MNIST:
  - the loss falls and test accuracy is well above chance (10 %) after
    two short epochs;
  - tp 2 trains the same model as tp 1: every epoch's numbers equal to the
    printed digits, up to a few units in the last for the split's
    reductions (relative 2e-3 on losses, 0.5 pt on accuracies);
  - with --augment flip-shift tp 2 still trains as tp 1 (and not as the
    plain run);
  - a tp-2 run killed in epoch 2 (--fault die) and resumed at tp 1 from its
    checkpoint prints the uninterrupted run's epoch 2;
  - the checkpoint is a timm state dict at global shapes: bound by name to
    @vit with htp-run --weights, its logits on test images equal the float64
    NumPy reference's forward with the same tensors (1e-4).
usage: check_train_vit.py HTP_RUN WORKDIR [DATA_DIR]"""
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "ref"))
import vit_train_ref as ref  # noqa: E402

htp_run, work = sys.argv[1:3]
data = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
os.makedirs(work, exist_ok=True)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


config = {"depth": 2, "dim": 24, "heads": 2, "mlp": 48, "patch": 7, "image": 28,
          "channels": 1, "classes": 10, "eps": 1e-6, "gelu": "none"}
batch = 32
mlir = os.path.join(work, "vit.mlir")
subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), "--model",
                *[x for k in ("depth", "dim", "heads", "mlp", "patch", "image", "channels",
                              "classes") for x in ("--" + k, str(config[k]))],
                "--batch", str(batch), "-o", mlir], check=True)


def run(*flags):
    result = subprocess.run([htp_run, mlir, "--train", "--data", data, *flags],
                            capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


def epochs(stdout):
    return [tuple(float(v) for v in m) for m in re.findall(
        r"^epoch \d+/\d+: loss ([\d.]+), train acc ([\d.]+)%, test loss ([\d.]+), "
        r"test acc ([\d.]+)%", stdout, re.M)]


def same(a, b):
    return len(a) == len(b) and all(
        abs(x[0] - y[0]) <= 2e-3 * y[0] and abs(x[2] - y[2]) <= 2e-3 * y[2] and
        abs(x[1] - y[1]) <= 0.5 and abs(x[3] - y[3]) <= 0.5 for x, y in zip(a, b))


common = ["--epochs", "2", "--limit-train", "1280", "--limit-test", "320", "--seed", "3",
          "--lr", "3e-3"]
code1, out1, err1 = run(*common, "--tp", "1")
code2, out2, err2 = run(*common, "--tp", "2")
e1, e2 = epochs(out1), epochs(out2)
check(code1 == 0 and len(e1) == 2, f"tp 1 run ({code1}): {err1[-2000:]} {out1}")
check(code2 == 0 and len(e2) == 2, f"tp 2 run ({code2}): {err2[-2000:]} {out2}")
if len(e1) == 2:
    check(e1[1][0] < e1[0][0], f"the loss did not fall: {e1}")
    check(e1[1][3] > 25, f"test accuracy {e1[1][3]}% after 2 epochs: not learning: {e1}")
check(same(e2, e1), f"tp 2 epochs {e2} differ from tp 1's {e1}")

# Augmented batches are drawn from (seed, step): the same on every rank.
code1a, out1a, err1a = run(*common, "--tp", "1", "--augment", "flip-shift")
code2a, out2a, _ = run(*common, "--tp", "2", "--augment", "flip-shift")
check(code1a == 0 and len(epochs(out1a)) == 2 and "augmented (flip-shift)" in err1a,
      f"augmented tp 1 run ({code1a}): {err1a[-1000:]}")
check(same(epochs(out2a), epochs(out1a)) and epochs(out1a) != e1,
      f"augmented: tp 2 {epochs(out2a)}, tp 1 {epochs(out1a)}, plain {e1}")

# Killed in epoch 2 (40 steps an epoch, counted from 0), resumed on tp 1.
ck = os.path.join(work, "ck.safetensors")
for path in (ck, ck + ".optim"):
    if os.path.exists(path):
        os.remove(path)
code, out, err = run(*common, "--tp", "2", "--checkpoint", ck, "--fault", "die:1@45")
check(code != 0 and len(epochs(out)) == 1 and "died" in err,
      f"the interrupted run ({code}): {out} {err[-1000:]}")
code, out, err = run(*common, "--tp", "1", "--resume", ck)
check(code == 0 and same(epochs(out), e1[1:]),
      f"resumed epoch 2 {epochs(out)} differs from {e1[1:]} ({err[-1000:]})")

# The checkpoint (after epoch 1) as a timm state dict: @vit's logits against
# the NumPy reference on the same tensors.
params = ref.read_safetensors(ck)
try:
    ref.check_params(params, config)
except Exception as e:  # noqa: BLE001 - reported as a failure
    check(False, f"checkpoint is not the model's state dict: {e}")
rng = np.random.default_rng(0)
images = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
np.save(os.path.join(work, "images.npy"), images)
logits_path = os.path.join(work, "logits.npy")
result = subprocess.run([htp_run, mlir, "--entry", "vit", "--weights", ck, "--input",
                         os.path.join(work, "images.npy"), "--output", logits_path,
                         "--iters", "1", "--warmup", "0"], capture_output=True, text=True)
check(result.returncode == 0, f"@vit with the checkpoint: {result.stderr[-1000:]}")
if result.returncode == 0:
    logits = np.load(logits_path)
    expected = ref.forward(params, images, config)[0]
    error = np.max(np.abs(logits - expected)) / np.max(np.abs(expected))
    check(error <= 1e-4, f"@vit on the checkpoint vs reference: {error:.2e}")

print("tp 1:", e1)
print("tp 2:", e2)
print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)

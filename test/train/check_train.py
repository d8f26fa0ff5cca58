#!/usr/bin/env python3
"""htp-run --train end to end on hand-written gradient entries (softmax
regression, fake_grad_block.c at tp 1 and 2) and a synthetic Fashion-MNIST
directory (class k: a bright stripe at rows 2k..2k+2 plus noise), so it runs
without the compiler or the data package:
  - the loss falls and tp 1 and tp 2 print the same epochs (same init, same
    shuffle, same updates up to the split's round-off: equal to 4 digits);
  - the metrics JSON holds what the spec lists;
  - a run killed after epoch 1 (--fault die) and resumed from its checkpoint
    prints the uninterrupted run's epoch 2; the checkpoint holds GLOBAL
    tensors under the parameters' names and its .optim the moments;
  - the data and option errors: a missing directory names the Debian
    package, a device is refused, a checkpoint path that is a device too.
usage: check_train.py HTP_RUN TP1.so TP2.so WORKDIR"""
import gzip, json, os, random, re, shutil, struct, subprocess, sys

htp_run, tp1, tp2, work = sys.argv[1:5]
os.makedirs(work, exist_ok=True)
data = os.path.join(work, "data")
os.makedirs(data, exist_ok=True)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def write_set(prefix, count, seed, where=data):
    rng = random.Random(seed)
    labels = [rng.randrange(10) for _ in range(count)]
    pixels = bytearray()
    for label in labels:
        image = [rng.randrange(60) for _ in range(784)]
        for row in range(2 * label + 4, 2 * label + 7):
            for col in range(28):
                image[row * 28 + col] = 200 + rng.randrange(56)
        pixels += bytes(image)
    with gzip.open(os.path.join(where, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, count, 28, 28) + bytes(pixels))
    with gzip.open(os.path.join(where, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 0x801, count) + bytes(labels))


write_set("train", 640, 1)
write_set("t10k", 250, 2)


def run(block, *flags):
    result = subprocess.run([htp_run, block, "--train", "--data", data, *flags],
                            capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


def epochs(stdout):
    return re.findall(r"^epoch (\d+)/\d+: loss ([\d.]+), train acc ([\d.]+)%, test loss ([\d.]+), "
                      r"test acc ([\d.]+)%", stdout, re.M)


common = ["--epochs", "2", "--lr", "0.01", "--seed", "5"]
metrics = os.path.join(work, "m.json")
code1, out1, err1 = run(tp1, *common, "--metrics", metrics)
code2, out2, _ = run(tp2, *common)
e1, e2 = epochs(out1), epochs(out2)
check(code1 == 0 and code2 == 0 and len(e1) == 2, "tp 1 and tp 2 runs: %s %s" % (err1, out1))
check(e1 == e2, "tp 1 and tp 2 epochs differ: %s vs %s" % (e1, e2))
check(float(e1[1][1]) < float(e1[0][1]), "the loss did not fall: %s" % e1)
check(float(e1[1][4]) > 50, "test accuracy too low on separable data: %s" % e1)
m = json.load(open(metrics))
for key in ["tp", "policy", "slow", "optimizer", "epochs", "entry", "eval_entry"]:
    check(key in m, "metrics lack %s" % key)
check(m["eval_entry"] == "lin_loss" and m["entry"] == "lin_loss_grad", "entries: %s" % m)
check(len(m["epochs"]) == 2 and all(k in m["epochs"][0] for k in
      ["train_loss", "train_acc", "test_loss", "test_acc", "epoch_s", "ms_per_step"]),
      "metrics epochs: %s" % m["epochs"])
check(abs(m["epochs"][0]["train_loss"] - float(e1[0][1])) < 1e-4, "metrics vs stdout")

# Interrupted after epoch 1 (steps count from 0: 20 steps an epoch of 32),
# resumed on the other tp: the same epoch 2.
ck = os.path.join(work, "ck.safetensors")
for path in (ck, ck + ".optim"):
    if os.path.exists(path):
        os.remove(path)
code, out, err = run(tp2, *common, "--checkpoint", ck, "--fault", "die:1@20")
check(code == 1 and len(epochs(out)) == 1 and "died at iteration 20" in err,
      "the interrupted run: %d %s %s" % (code, out, err))
code, out, err = run(tp1, *common, "--resume", ck)
check(code == 0 and epochs(out) == e1[1:], "resumed epoch 2 %s differs from %s (%s)" %
      (epochs(out), e1[1:], err))
raw = open(ck, "rb").read()
header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
check(header["head.weight"]["shape"] == [10, 784] and header["head.bias"]["shape"] == [10],
      "checkpoint shapes: %s" % header)
check(header["__metadata__"]["htp.epoch"] == "1" and header["__metadata__"]["htp.optimizer"]
      == "adamw", "checkpoint metadata: %s" % header["__metadata__"])
raw = open(ck + ".optim", "rb").read()
optim = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
check(sorted(k for k in optim if k != "__metadata__") ==
      ["m.head.bias", "m.head.weight", "v.head.bias", "v.head.weight"], "optim: %s" % optim)

# SGD with a constant rate: a checkpoint of a 1-epoch run resumes into the
# 2-epoch run's epoch 2 (the schedule does not depend on --epochs).
sgd = ["--optimizer", "sgd", "--schedule", "constant", "--seed", "7"]
_, full, _ = run(tp1, *sgd, "--epochs", "2")
run(tp1, *sgd, "--epochs", "1", "--checkpoint", ck)
_, resumed, _ = run(tp2, *sgd, "--epochs", "2", "--resume", ck)
check(len(epochs(full)) == 2 and epochs(resumed) == epochs(full)[1:],
      "sgd resume: %s vs %s" % (epochs(resumed), epochs(full)))

# A checkpoint whose own metadata disagree (htp.epoch edited to 0 beside
# its htp.step) is refused: it resumed "from epoch 0" with the weights of
# epoch 1.
run(tp1, *sgd, "--epochs", "1", "--checkpoint", ck)
edited = os.path.join(work, "edited.safetensors")
raw = open(ck, "rb").read()
check(raw.count(b'"htp.epoch":"1"') == 1, "the checkpoint's epoch: %s" % raw[:400])
open(edited, "wb").write(raw.replace(b'"htp.epoch":"1"', b'"htp.epoch":"0"'))
shutil.copyfile(ck + ".optim", edited + ".optim")
code, _, err = run(tp1, *sgd, "--epochs", "2", "--resume", edited)
check(code == 1 and "its metadata disagree: htp.step" in err, "edited epoch: %s" % err)

# Errors: exit 1 and a message that says what to do.
missing = os.path.join(work, "no-such-dir")
result = subprocess.run([htp_run, tp1, "--train", "--data", missing], capture_output=True, text=True)
check(result.returncode == 1 and "dataset-fashion-mnist" in result.stderr and missing in
      result.stderr, "missing data dir: %s" % result.stderr)
result = subprocess.run([htp_run, tp1, "--train", "--data", "/dev/zero"], capture_output=True,
                        text=True)
check(result.returncode == 1 and "not a directory" in result.stderr, "--data /dev/zero: %s" %
      result.stderr)
devices = os.path.join(work, "devices")
os.makedirs(devices, exist_ok=True)
for name in ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"]:
    link = os.path.join(devices, name)
    if not os.path.lexists(link):
        os.symlink("/dev/zero", link)
result = subprocess.run([htp_run, tp1, "--train", "--data", devices], capture_output=True,
                        text=True)
check(result.returncode == 1 and "train-images-idx3-ubyte.gz" in result.stderr,
      "a device as the images: %s" % result.stderr)
code, _, err = run(tp1, "--checkpoint", "/dev/zero")
check(code == 2 and "not a regular file" in err, "--checkpoint /dev/zero: %s" % err)
code, _, err = run(tp1, "--limit-train", "20")
check(code == 1 and "no batch of 32" in err and "give --limit-train >= 32" in err,
      "too few images: %s" % err)
small = os.path.join(work, "small")  # a whole set smaller than a batch: no --limit-train helps
os.makedirs(small, exist_ok=True)
write_set("train", 20, 3, small)
write_set("t10k", 20, 4, small)
result = subprocess.run([htp_run, tp1, "--train", "--data", small], capture_output=True, text=True)
check(result.returncode == 1 and "holds 20 images, which make no batch of 32" in result.stderr
      and "--limit-train" not in result.stderr, "a set smaller than a batch: %s" % result.stderr)
code, _, err = run(tp1, "--policy", "migrate")
check(code == 1 and "--policy none" in err, "--policy with --train: %s" % err)
code, _, err = run(tp1, "--entry", "lin_loss")
check(code == 1 and "returns no gradients" in err, "--entry without gradients: %s" % err)
code, _, err = run(tp1, "--lr", "-1")
check(code == 2 and "--lr expects" in err, "--lr -1: %s" % err)

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""The training step of the whole ViT of issue 9 on this CPU: PyTorch
(eager, torch.compile) and, with --htp-run, htp-run --train on the same
model, batch and cores, with the ratio measured in the same run.

One step is what `htp-run --train` does per batch: forward, cross-entropy
with probability targets (one-hot rows, as the loader passes), backward,
AdamW update, gradients cleared (set to None). The model is timm's
VisionTransformer with spec F's arguments (test/ref/vit_train_ref.py's
timm_model: global_pool='token', class_token=True, qkv_bias=True, LayerNorm
eps --eps, GELU exact or tanh), float32, on random images and labels of a
fixed seed (the data do not change the time).

Modes (--modes, comma-separated):
  eager     the model as built
  compile   torch.compile(model) (inductor: needs a C++ compiler); its
            compile happens in the warm-up steps and is timed apart. A
            failure is reported as a row, not an exit.
  htp       (added by --htp-run PATH) examples/gen_vit.py --model writes the
            same model, and `htp-run --train --epochs 1 --limit-train
            B*(warmup+iters)` trains it on Fashion-MNIST (--data); its
            ms/step is htp-run's own (the epoch's training time / steps:
            batch loading, forward, backward, AdamW, no evaluation), so
            its warm-up steps are in it. --tp sets htp-run's ranks.

The modes run in turn --rounds times (default 1); with htp and eager both
there, each round's htp / eager ratio of mean ms/step is printed and their
median is the figure to quote (the machine's noise hits both sides of a
round alike).

For each mode it prints the median, min and mean ms per step over --iters
timed steps (after --warmup), the loss before the first and after the last
step (it must fall on a fixed batch: a check that the step trains), and an
estimate of the achieved GFLOP/s (3x the forward's matmul FLOPs: a
convention, not a count of what torch runs). --report json prints one JSON
object instead. Needs torch and timm: without them it says so and exits 77.

    bench/train_step.py                                    # the defaults below
    bench/train_step.py --htp-run build/tools/htp-run/htp-run --modes htp,eager --rounds 3
    bench/train_step.py --htp-run build/tools/htp-run/htp-run --modes htp,eager --rounds 3 \
        --matmul-precision bf16        # the linears on bf16 operands, both sides
    bench/train_step.py --depth 12 --dim 768 --heads 12 --mlp 3072 --patch 16 \\
        --image 224 --channels 3 --classes 1000 --batch 8 --iters 5   # ViT-B/16
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "ref"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from train_policies import int_from, number_from  # noqa: E402  (the scripts' shared checks)

SKIP = 77


def forward_flops(c, batch):
    """Matmul FLOPs of one forward (2 per multiply-add)."""
    d, m, t = c["dim"], c["mlp"], (c["image"] // c["patch"]) ** 2 + 1
    n = t - 1
    per_block = 2 * batch * t * (3 * d * d + d * d + 2 * d * m) + 2 * 2 * batch * t * t * d
    patch = 2 * batch * n * c["channels"] * c["patch"] ** 2 * d
    head = 2 * batch * d * c["classes"]
    return c["depth"] * per_block + patch + head


def time_mode(mode, c, a, torch, ref):
    import torch.nn.functional as F
    torch.manual_seed(a.seed)
    model = ref.timm_model(c)
    model.train()
    gen = torch.Generator().manual_seed(a.seed)
    images = torch.randn(a.batch, c["channels"], c["image"], c["image"], generator=gen)
    labels = torch.randint(0, c["classes"], (a.batch,), generator=gen)
    targets = F.one_hot(labels, c["classes"]).float()
    step_model = model
    if mode == "compile":
        step_model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)

    def step():
        loss = F.cross_entropy(step_model(images), targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    with torch.no_grad():
        loss_before = F.cross_entropy(model(images), targets).item()
    start = time.perf_counter()
    for _ in range(a.warmup):
        step()
    warmup_s = time.perf_counter() - start
    times = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    with torch.no_grad():
        loss_after = F.cross_entropy(model(images), targets).item()
    median = statistics.median(times)
    return {"mode": mode, "median_ms": median, "min_ms": min(times),
            "mean_ms": statistics.fmean(times), "times_ms": times, "warmup_s": warmup_s,
            "loss_before": loss_before, "loss_after": loss_after,
            "gflops": 3 * forward_flops(c, a.batch) / (median * 1e-3) / 1e9}


def time_htp(c, a, work):
    import subprocess
    import tempfile
    mlir = os.path.join(work, "vit.mlir")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), "--model",
                    "--depth", str(c["depth"]), "--dim", str(c["dim"]), "--heads", str(c["heads"]),
                    "--mlp", str(c["mlp"]), "--patch", str(c["patch"]), "--image", str(c["image"]),
                    "--channels", str(c["channels"]), "--classes", str(c["classes"]),
                    "--batch", str(a.batch), "--eps", repr(c["eps"]), "--gelu", c["gelu"],
                    "-o", mlir], check=True)
    metrics = os.path.join(work, "metrics.json")
    cmd = [a.htp_run, mlir, "--train", "--epochs", "1", "--tp", str(a.tp), "--seed", str(a.seed),
           "--limit-train", str(a.batch * (a.warmup + a.iters)), "--limit-test", str(a.batch),
           "--lr", str(a.lr), "--weight-decay", str(a.weight_decay), "--metrics", metrics]
    if a.data:
        cmd += ["--data", a.data]
    if a.matmul_precision != "f32":
        cmd += ["--matmul-precision", a.matmul_precision]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"htp-run exited with {run.returncode}: {run.stderr.strip()[-300:]}")
    with open(metrics) as f:
        epoch = json.load(f)["epochs"][0]
    ms = epoch["ms_per_step"]
    return {"mode": f"htp tp{a.tp}", "median_ms": ms, "min_ms": ms, "mean_ms": ms,
            "warmup_s": 0.0, "loss_before": float("nan"), "loss_after": epoch["train_loss"],
            "gflops": 3 * forward_flops(c, a.batch) / (ms * 1e-3) / 1e9}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int_from(1, 1024), default=4, help="blocks (default 4)")
    parser.add_argument("--dim", type=int_from(1, 1 << 16), default=128, help="model width (default 128)")
    parser.add_argument("--heads", type=int_from(1, 1024), default=4, help="attention heads (default 4)")
    parser.add_argument("--mlp", type=int_from(1, 1 << 18), default=None, help="MLP width (default 4*dim)")
    parser.add_argument("--patch", type=int_from(1, 1024), default=4, help="patch side (default 4)")
    parser.add_argument("--image", type=int_from(1, 4096), default=28, help="image side (default 28)")
    parser.add_argument("--channels", type=int_from(1, 64), default=1, help="image channels (default 1)")
    parser.add_argument("--classes", type=int_from(2, 1 << 20), default=10, help="classes (default 10)")
    parser.add_argument("--batch", type=int_from(1, 1 << 16), default=64, help="images per step (default 64)")
    parser.add_argument("--eps", type=number_from(0, above=True), default=1e-6, help="LayerNorm eps (default 1e-6)")
    parser.add_argument("--gelu", choices=["none", "tanh"], default="none",
                        help="GELU approximation (default none: exact erf)")
    parser.add_argument("--lr", type=number_from(0, above=True), default=1e-3, help="AdamW lr (default 1e-3)")
    parser.add_argument("--weight-decay", type=number_from(0), default=0.05,
                        help="AdamW weight decay (default 0.05)")
    parser.add_argument("--iters", type=int_from(1), default=10, help="timed steps (default 10)")
    parser.add_argument("--warmup", type=int_from(0), default=2,
                        help="untimed steps first (default 2; compile happens here)")
    parser.add_argument("--threads", type=int_from(1, 1024), default=None,
                        help="torch.set_num_threads (default: torch's own choice)")
    parser.add_argument("--modes", default=None,
                        help="comma-separated: eager, compile, htp (default eager,compile, "
                             "and htp first with --htp-run)")
    parser.add_argument("--htp-run", help="htp-run to time as mode htp")
    parser.add_argument("--tp", type=int_from(1, 1024), default=1, help="htp-run --tp (default 1)")
    parser.add_argument("--data", help="htp-run --data (default: its own)")
    parser.add_argument("--rounds", type=int_from(1), default=1,
                        help="run the modes in turn this many times (default 1)")
    parser.add_argument("--matmul-precision", choices=["f32", "tf32", "bf16"], default="f32",
                        help="htp-run --matmul-precision; PyTorch gets "
                             "torch.set_float32_matmul_precision's counterpart (highest, high, "
                             "medium; what each does is the device's: PyTorch 2.15's CPU "
                             "'medium' measured here kept f32's accuracy, bench/RESULTS.md)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", choices=["table", "json"], default="table")
    a = parser.parse_args()
    if a.modes is None:
        a.modes = ("htp," if a.htp_run else "") + "eager,compile"
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in ("eager", "compile", "htp")]
    if bad or not modes:
        parser.error(f"--modes takes eager, compile and htp, got {a.modes!r}")
    if "htp" in modes and not a.htp_run:
        parser.error("mode htp needs --htp-run PATH")
    if a.rounds < 1 or a.tp < 1:
        parser.error("--rounds and --tp must be >= 1")
    for flag in ("depth", "dim", "heads", "patch", "image", "channels", "classes", "batch",
                 "iters"):
        if getattr(a, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    if a.warmup < 0:
        parser.error("--warmup must be >= 0")
    if a.dim % a.heads or a.image % a.patch:
        parser.error("--dim must be a multiple of --heads and --image of --patch")
    if "compile" in modes and a.warmup < 1:
        parser.error("compile needs --warmup >= 1 (its compile is not a step's time)")
    try:
        import torch
        import timm  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch and timm are needed ({e})")
        return SKIP
    import vit_train_ref as ref
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    torch.set_float32_matmul_precision(
        {"f32": "highest", "tf32": "high", "bf16": "medium"}[a.matmul_precision])
    c = {"depth": a.depth, "dim": a.dim, "heads": a.heads, "mlp": a.mlp if a.mlp is not None else 4 * a.dim,
         "patch": a.patch, "image": a.image, "channels": a.channels, "classes": a.classes,
         "eps": a.eps, "gelu": a.gelu}
    import tempfile
    rows, ratios = [], []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(a.rounds):
            mean = {}
            for mode in modes:
                try:
                    row = (time_htp(c, a, work) if mode == "htp"
                           else time_mode(mode, c, a, torch, ref))
                    mean[mode] = row["mean_ms"]
                except Exception as e:  # noqa: BLE001 - torch.compile fails in many ways
                    row = {"mode": mode, "error": f"{type(e).__name__}: {str(e)[:300]}"}
                rows.append(row)
            if "htp" in mean and "eager" in mean:
                ratios.append(mean["eager"] / mean["htp"])
    info = {"torch": torch.__version__, "threads": torch.get_num_threads(), "batch": a.batch,
            "config": c, "iters": a.iters, "warmup": a.warmup,
            "params": sum(p.numel() for p in ref.timm_model(c).parameters()),
            "train_gflop_per_step_est": 3 * forward_flops(c, a.batch) / 1e9, "rows": rows,
            "speedup_vs_eager": ratios,
            "median_speedup_vs_eager": statistics.median(ratios) if ratios else None}
    if a.report == "json":
        print(json.dumps(info))
        return 0 if all("error" not in r for r in rows) else 1
    print(f"timm VisionTransformer {c}, batch {a.batch}, {info['params']} params, torch "
          f"{torch.__version__}, {info['threads']} threads, AdamW, {a.iters} steps after "
          f"{a.warmup} warm-up")
    print("| mode | median ms/step | min ms | mean ms | GFLOP/s (est.) | loss before -> after "
          "| warm-up s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['mode']} | failed: {r['error']} | | | | | |")
            continue
        before = "-" if r["loss_before"] != r["loss_before"] else f"{r['loss_before']:.4f}"
        print(f"| {r['mode']} | {r['median_ms']:.2f} | {r['min_ms']:.2f} | {r['mean_ms']:.2f} | "
              f"{r['gflops']:.1f} | {before} -> {r['loss_after']:.4f} | "
              f"{r['warmup_s']:.1f} |")
    if ratios:
        print(f"htp speed-up over eager (eager mean ms / htp ms) per round: "
              f"{', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}x")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

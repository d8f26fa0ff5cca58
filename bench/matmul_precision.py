#!/usr/bin/env python3
"""An f32 ViT block at each matmul precision: htp-run --matmul-precision
against PyTorch's torch.set_float32_matmul_precision on the same weights.

In alternating rounds (the shared machine's load hits every row alike),
each row the median ms of --iters after --warmup:
  htp-run f32 / tf32 / bf16   the f32 block (gen_vit.py), --matmul-precision
  htp-run bf16 block          the same block generated in bf16 (gen_vit.py
                              --dtype bf16; every tensor bf16, the weights
                              rounded on load): what a user picks instead
                              of an f32 block at bf16 precision (--no-bf16-block
                              leaves it out)
  PyTorch highest / medium    timm's Block (bench/block.py's timm_block),
                              eager, torch.no_grad
and prints a Markdown table: the median over rounds, the ratio to htp-run
f32 of the same round (median), and each output's rms relative error
against the float64 NumPy reference (test/ref/vit_ref.py), for htp-run's
reduced precisions also against the reference whose linears' operands are
rounded alike (check_e2e.round_mantissa): what the precision promises.
Without torch and timm the PyTorch rows are left out.

    bench/matmul_precision.py --build build --iters 10 --rounds 3
    bench/matmul_precision.py --precisions f32,bf16 --batch 64   # fewer rows, larger batch
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "ref"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import block as block_bench  # noqa: E402  (its arguments, timm_block, median_ms)
import check_e2e  # noqa: E402
import vit_ref  # noqa: E402

TORCH_NAMES = {"f32": "highest", "tf32": "high", "bf16": "medium"}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    block_bench.add_block_arguments(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-bf16-block", action="store_true",
                        help="leave out the bf16 block's row")
    parser.add_argument("--precisions", default="f32,tf32,bf16",
                        help="htp-run's rows, comma-separated (default f32,tf32,bf16)")
    a = parser.parse_args()
    precisions = a.precisions.split(",")
    if not precisions or any(p not in TORCH_NAMES for p in precisions) or "f32" not in precisions:
        parser.error("--precisions: a list of f32, tf32, bf16 that includes f32")

    rng = np.random.default_rng(0)
    weights = check_e2e.random_weights(rng, 1, a.dim, a.mlp)
    x = rng.standard_normal((a.batch, a.tokens, a.dim)).astype(np.float32)
    htp_run = os.path.join(a.build, "tools", "htp-run", "htp-run")
    try:
        import torch
        import timm  # noqa: F401
    except ImportError as error:
        torch = None
        print(f"PyTorch rows left out: {error}")
    times = {}   # row -> [ms per round]
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        block = os.path.join(tmp, "block.mlir")
        weights_path, x_path = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "x.npy")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"),
                        *block_bench.block_shape(a), "-o", block], check=True)
        check_e2e.write_safetensors(weights_path, weights)
        np.save(x_path, x)
        bf16_block = os.path.join(tmp, "block_bf16.mlir")
        if not a.no_bf16_block:
            subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"),
                            *block_bench.block_shape(a), "--dtype", "bf16", "-o", bf16_block],
                           check=True)
        if torch is not None:
            module, xt = block_bench.timm_block(torch, x, weights, a)
        for _ in range(a.rounds):
            for precision in precisions:
                y_path = os.path.join(tmp, f"{precision}.npy")
                out = subprocess.run([htp_run, block, "--weights", weights_path, "--input",
                                      x_path, "--output", y_path, "--iters", str(a.iters),
                                      "--warmup", str(a.warmup), "--report", "json",
                                      "--matmul-precision", precision],
                                     check=True, capture_output=True, text=True)
                times.setdefault(f"htp-run {precision}", []).append(
                    json.loads(out.stdout)["median_ms"])
                outputs[f"htp-run {precision}"] = np.load(y_path)
            if not a.no_bf16_block:
                y_path = os.path.join(tmp, "bf16_block.npy")
                out = subprocess.run([htp_run, bf16_block, "--weights", weights_path, "--input",
                                      x_path, "--output", y_path, "--iters", str(a.iters),
                                      "--warmup", str(a.warmup), "--report", "json"],
                                     check=True, capture_output=True, text=True)
                times.setdefault("htp-run bf16 block", []).append(
                    json.loads(out.stdout)["median_ms"])
                outputs["htp-run bf16 block"] = np.load(y_path)
            if torch is None:
                continue
            for precision in ("f32", "bf16"):
                name = TORCH_NAMES[precision]
                torch.set_float32_matmul_precision(name)

                def run():
                    with torch.no_grad():
                        return module(xt)

                outputs[f"PyTorch {name}"] = run().numpy()
                times.setdefault(f"PyTorch {name}", []).append(
                    block_bench.median_ms(run, a.iters, a.warmup))
        torch_note = f"PyTorch {torch.__version__}, " if torch is not None else ""
    exact = vit_ref.vit_blocks(x, weights, 1, a.heads)
    rounded = {p: vit_ref.vit_blocks(x, weights, 1, a.heads,
                                     operand=lambda v, k=check_e2e.MANTISSA_BITS[p]:
                                     check_e2e.round_mantissa(v, k))
               for p in precisions if p != "f32"}
    base = times["htp-run f32"]
    print(f"ViT block, batch {a.batch}, tokens {a.tokens}, dim {a.dim}, heads {a.heads}, mlp "
          f"{a.mlp}; {torch_note}{a.rounds} alternating rounds of {a.iters} iterations after "
          f"{a.warmup}; CPU GEMMs through {os.environ.get('ONEDNN_MAX_CPU_ISA', 'the CPU')}'s "
          f"best ISA\n")
    print("| what | median ms | x htp-run f32 (per round, median) | rms rel. error vs f64 | "
          "vs f64 with the linears' operands rounded alike |")
    print("|---|---|---|---|---|")
    for name, ms in times.items():
        ratio = statistics.median(b / m for b, m in zip(base, ms))
        precision = name.split()[-1]
        alike = (f"{check_e2e.rms_relative(outputs[name], rounded[precision]):.2e}"
                 if name.startswith("htp-run") and precision in rounded else "—")
        if name.endswith("block"):
            alike = "—"
        print(f"| {name} | {statistics.median(ms):.1f} | {ratio:.2f} | "
              f"{check_e2e.rms_relative(outputs[name], exact):.2e} | {alike} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

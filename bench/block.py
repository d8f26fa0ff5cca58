#!/usr/bin/env python3
"""Forward time of one ViT block: htp-run vs its GEMM-only bound and NumPy.

Runs, one after the other in the same invocation (so the ratios share the
machine's state):
  htp-run        the block through the JIT (--report json, median of --iters)
  GEMM bound     build/bench/htp-bench-gemm: the block's GEMMs alone, through
                 the same OpenBLAS calls (no norms, softmax, GELU, bias, residual)
  NumPy f32      test/ref/vit_ref.py's forward in float32, with a vectorised
                 erf (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7) instead of the
                 reference's exact per-element math.erf
  PyTorch        torch's CPU forward of the same block, when torch is importable
and prints a Markdown table of median ms and ratios to htp-run.

    bench/block.py --build build --iters 10       # ViT-B/16: d=768, 12 heads, 197 tokens, batch 8
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "ref"))
import vit_ref  # noqa: E402


def erf_vectorised(x):
    """Abramowitz-Stegun 7.1.26 in x's dtype; what a NumPy user writes without scipy."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def median_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=197)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--mlp", type=int, default=3072)
    args = parser.parse_args()

    shape = ["--depth", "1", "--dim", str(args.dim), "--heads", str(args.heads), "--mlp",
             str(args.mlp), "--tokens", str(args.tokens), "--batch", str(args.batch)]
    with tempfile.TemporaryDirectory() as tmp:
        block = os.path.join(tmp, "block.mlir")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), *shape,
                        "-o", block], check=True)
        out = subprocess.run([os.path.join(args.build, "tools", "htp-run", "htp-run"), block,
                              "--iters", str(args.iters), "--warmup", str(args.warmup),
                              "--report", "json"], check=True, capture_output=True, text=True)
    htp = json.loads(out.stdout)
    out = subprocess.run([os.path.join(args.build, "bench", "htp-bench-gemm"), "--batch",
                          str(args.batch), "--tokens", str(args.tokens), "--dim", str(args.dim),
                          "--heads", str(args.heads), "--mlp", str(args.mlp), "--iters",
                          str(args.iters), "--warmup", str(args.warmup)],
                         check=True, capture_output=True, text=True)
    gemm = json.loads(out.stdout)

    rng = np.random.default_rng(0)
    d, m = args.dim, args.mlp
    shapes = {"norm1.weight": [d], "norm1.bias": [d], "attn.qkv.weight": [3 * d, d],
              "attn.qkv.bias": [3 * d], "attn.proj.weight": [d, d], "attn.proj.bias": [d],
              "norm2.weight": [d], "norm2.bias": [d], "mlp.fc1.weight": [m, d],
              "mlp.fc1.bias": [m], "mlp.fc2.weight": [d, m], "mlp.fc2.bias": [d]}
    weights = {f"blocks.0.{k}": (rng.standard_normal(s) * 0.02).astype(np.float32)
               for k, s in shapes.items()}
    x = rng.standard_normal((args.batch, args.tokens, d)).astype(np.float32)
    numpy_ms = median_ms(lambda: vit_ref.vit_blocks(x, weights, 1, args.heads, dtype=np.float32,
                                                    erf=erf_vectorised), args.iters, args.warmup)

    rows = [("htp-run (JIT)", htp["median_ms"]), ("GEMM-only bound (OpenBLAS)", gemm["median_ms"]),
            ("NumPy f32", numpy_ms)]
    try:
        import torch
        torch_ms = torch_forward_ms(torch, x, weights, args)
        rows.append((f"PyTorch {torch.__version__} CPU", torch_ms))
    except ImportError:
        rows.append(("PyTorch CPU", None))

    base = htp["median_ms"]
    print(f"shape: batch {args.batch}, tokens {args.tokens}, dim {d}, heads {args.heads}, "
          f"mlp {m}; {args.iters} iterations after {args.warmup} warm-up; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
    print("| what | median ms | ratio to htp-run |")
    print("|---|---|---|")
    for name, ms in rows:
        if ms is None:
            print(f"| {name} | not installed | — |")
        else:
            print(f"| {name} | {ms:.1f} | {ms / base:.2f} |")
    print(f"\nhtp-run: {htp['gflops']:.1f} GFLOP/s; GEMM bound: {gemm['gflops']:.1f} GFLOP/s")


def torch_forward_ms(torch, x, weights, args):
    """The same block with torch.nn.functional, float32, no autograd."""
    F = torch.nn.functional
    w = {k: torch.from_numpy(v) for k, v in weights.items()}
    p = lambda s: w[f"blocks.0.{s}"]
    xt = torch.from_numpy(x)
    heads, d = args.heads, args.dim

    def forward():
        with torch.no_grad():
            h = F.layer_norm(xt, (d,), p("norm1.weight"), p("norm1.bias"), 1e-6)
            qkv = F.linear(h, p("attn.qkv.weight"), p("attn.qkv.bias"))
            b, n, _ = qkv.shape
            q, k, v = qkv.reshape(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
            r = xt + F.linear(a, p("attn.proj.weight"), p("attn.proj.bias"))
            h = F.layer_norm(r, (d,), p("norm2.weight"), p("norm2.bias"), 1e-6)
            return r + F.linear(F.gelu(F.linear(h, p("mlp.fc1.weight"), p("mlp.fc1.bias"))),
                                p("mlp.fc2.weight"), p("mlp.fc2.bias"))
    return median_ms(forward, args.iters, args.warmup)


if __name__ == "__main__":
    main()

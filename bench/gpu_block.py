#!/usr/bin/env python3
"""bench/gpu_block.py - HTP's compiled ViT blocks on a GPU against PyTorch (issue 8 item 5).

For every tp-1 block of a gpu-blocks/ folder (scripts/gpu-prepare.sh:
ViT-B/16 and ViT-L/16, batch 64, 197 tokens, f32 and bf16), on the same GPU:
  htp       htp-run BLOCK.so --device cuda (median iteration time), and once
            with --check: the same .so on the CPU, max relative error
  eager     timm's Block (same dims, qkv bias, exact GELU), same dtype and
            batch, PyTorch eager
  compile   the same Block under torch.compile
  gemm      the cuBLAS GEMM-only bound: the block's six GEMMs alone (qkv,
            q·kᵀ, p·v, proj, fc1, fc2) through torch.matmul (cuBLAS), each
            timed and summed: what the block costs if everything else were
            free
f32 runs without TF32 everywhere (HTP's cuBLAS calls are plain FP32). PyTorch
is timed like htp-run times an iteration: CUDA events around each forward,
back to back, no L2 flush, median of --iters after --warmup.

Prints one table row per block (times in ms; speedups eager/htp and
compile/htp, gemm/htp as HTP's fraction of the bound) and the issue's
targets for ViT-L/16 bf16 (>= 1.3x eager, >= 1.0x compile); writes --csv.

    python3 bench/gpu_block.py --htp-run build-gpu-check/tools/htp-run/htp-run \\
        --blocks gpu-blocks --csv gpu-block.csv
Exits 77 without torch/timm or a GPU, 1 when an htp-run fails.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys


def read_blocks(folder):
    """blocks.txt of gpu-prepare.sh: file model dtype tp dim heads mlp batch tokens."""
    rows = []
    with open(os.path.join(folder, "blocks.txt")) as handle:
        for line in handle:
            f = line.split()
            if len(f) == 9:
                rows.append({"file": os.path.join(folder, f[0]), "model": f[1], "dtype": f[2],
                             "tp": int(f[3]), "dim": int(f[4]), "heads": int(f[5]),
                             "mlp": int(f[6]), "batch": int(f[7]), "tokens": int(f[8])})
    return rows


def htp_run(args, block, extra):
    cmd = [args.htp_run, block["file"], "--device", "cuda", "--report", "json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def cuda_median(torch, fn, warmup, iters):
    times = []
    for i in range(warmup + iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def gemm_bound(torch, block, dtype, warmup, iters):
    """The six GEMMs of one block, each timed alone, summed (ms)."""
    b, t, d, h, m = block["batch"], block["tokens"], block["dim"], block["heads"], block["mlp"]
    rows, hd = b * t, d // h
    dev = "cuda"
    r = lambda *shape: torch.randn(*shape, device=dev, dtype=dtype)  # noqa: E731
    x, wqkv, wproj = r(rows, d), r(3 * d, d), r(d, d)
    w1, w2, hidden = r(m, d), r(d, m), r(rows, m)
    q, k = r(b * h, t, hd), r(b * h, t, hd)
    p = r(b * h, t, t)
    gemms = [lambda: x @ wqkv.t(), lambda: q @ k.transpose(1, 2), lambda: p @ k,
             lambda: x @ wproj.t(), lambda: x @ w1.t(), lambda: hidden @ w2.t()]
    return sum(cuda_median(torch, g, warmup, iters) for g in gemms)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--htp-run", required=True)
    parser.add_argument("--blocks", default="gpu-blocks")
    parser.add_argument("--csv", default="gpu-block.csv")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--no-check", action="store_true", help="skip the CPU --check runs")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = parser.parse_args()
    try:
        import torch
        import timm
        from timm.models.vision_transformer import Block
    except ImportError as error:
        print(f"gpu_block: {error.name} not installed: skipped")
        return 77
    if not torch.cuda.is_available():
        print("gpu_block: no CUDA device: skipped")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, {props.multi_processor_count} SMs; PyTorch {torch.__version__}, "
          f"timm {timm.__version__}; {args.iters} iterations after {args.warmup} warm-up, medians")
    results, failed = [], 0
    for block in (b for b in read_blocks(args.blocks) if b["tp"] == 1):
        name = os.path.basename(block["file"])
        dtype = torch.float32 if block["dtype"] == "f32" else torch.bfloat16
        row = {"block": name, "model": block["model"], "dtype": block["dtype"],
               "batch": block["batch"], "device": props.name}
        try:
            report = htp_run(args, block, ["--iters", str(args.iters), "--warmup",
                                           str(args.warmup)])
            row["htp_ms"] = report["median_ms"]
            if not args.no_check:
                check = htp_run(args, block, ["--iters", "1", "--warmup", "0", "--check"])
                results_ = (check.get("check") or {}).get("results", [])
                row["check_error"] = max((r["error"] for r in results_), default=None)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as error:
            print(f"gpu_block: {name}: {error}")
            failed += 1
        torch.manual_seed(0)
        module = Block(block["dim"], block["heads"], mlp_ratio=block["mlp"] / block["dim"],
                       qkv_bias=True).cuda().eval().to(dtype)
        x = torch.randn(block["batch"], block["tokens"], block["dim"], device="cuda", dtype=dtype)
        with torch.no_grad():
            row["eager_ms"] = cuda_median(torch, lambda: module(x), args.warmup, args.iters)
            if not args.no_compile:
                compiled = torch.compile(module)
                compiled(x)  # compiles outside the timing
                row["compile_ms"] = cuda_median(torch, lambda: compiled(x), args.warmup,
                                                args.iters)
            row["gemm_ms"] = gemm_bound(torch, block, dtype, args.warmup, args.iters)
        if "htp_ms" in row:
            row["x_eager"] = row["eager_ms"] / row["htp_ms"]
            if "compile_ms" in row:
                row["x_compile"] = row["compile_ms"] / row["htp_ms"]
            row["gemm_fraction"] = row["gemm_ms"] / row["htp_ms"]
        results.append(row)
        del module, x
        torch.cuda.empty_cache()

    columns = ["block", "model", "dtype", "batch", "htp_ms", "eager_ms", "compile_ms", "gemm_ms",
               "x_eager", "x_compile", "gemm_fraction", "check_error", "device"]
    fmt = lambda v: "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
    print("| " + " | ".join(columns[:-1]) + " |")
    print("|" + "---|" * (len(columns) - 1))
    for row in results:
        print("| " + " | ".join(fmt(row.get(c)) for c in columns[:-1]) + " |")
    with open(args.csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in results:
            writer.writerow({c: row.get(c, "") for c in columns})
    for row in results:
        if row["model"] == "vit_l16" and row["dtype"] == "bf16" and "x_eager" in row:
            ok_eager = row["x_eager"] >= 1.3
            ok_compile = row.get("x_compile", 0) >= 1.0
            print(f"target ViT-L/16 bf16: {row['x_eager']:.2f}x eager (>= 1.3: "
                  f"{'met' if ok_eager else 'MISSED'}), {row.get('x_compile', float('nan')):.2f}x "
                  f"torch.compile (>= 1.0: {'met' if ok_compile else 'MISSED'})")
    print(f"wrote {args.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

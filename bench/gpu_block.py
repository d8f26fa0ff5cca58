#!/usr/bin/env python3
"""bench/gpu_block.py - HTP's compiled ViT blocks on a GPU against PyTorch (issue 8 item 5).

For every tp-1 block of a gpu-blocks/ folder (scripts/gpu-prepare.sh:
ViT-B/16 and ViT-L/16, batch 64, 197 tokens, f32 and bf16; --only picks
some), on the same GPU:
  htp       htp-run BLOCK.so --device cuda (median iteration time), with
            --check: the same .so on the CPU, max relative error
  timm      (--timm-check) the same run given timm's Block's weights and an
            input (--weights, --input), its --output against that Block in
            float64 on the GPU (weights and input rounded to bf16 first for a
            bf16 block): max |y - y64| / max |y64|, within 1e-4 (f32) or
            2e-2 (bf16); the Block in the block's own dtype is measured the
            same way beside it, for scale
  eager     timm's Block (same dims, qkv bias, exact GELU, layer-norm eps
            1e-6), same dtype and batch, PyTorch eager
  compile   the same Block under torch.compile (--no-compile skips it)
  gemm      the cuBLAS GEMM-only bound: the block's six GEMMs alone (qkv,
            q·kᵀ, p·v, proj, fc1, fc2) through torch.matmul (cuBLAS), each
            timed and summed: what the block costs if everything else were
            free
f32 runs without TF32 everywhere (HTP's cuBLAS calls are plain FP32) unless
--matmul-precision tf32|bf16: htp-run gets it (its linears on TF32 or bf16
operands, cuBLAS's FAST_TF32 / FAST_16BF compute types) and PyTorch gets
torch.set_float32_matmul_precision("high" / "medium": TF32 on CUDA; PyTorch
has no bf16-operand float32 GEMM there), the timm check's tolerance widens
to 4e-3 (tf32) or 2e-2 (bf16), and the variant column says so. PyTorch
is timed like htp-run times an iteration: CUDA events around each forward,
back to back, no L2 flush, median of --iters after --warmup.

Prints one table row per block as it finishes and writes it to --csv at once
(--append adds to an existing CSV), so a run stopped by a time limit keeps
the blocks it finished; then the table (times in ms; speedups eager/htp and
compile/htp, gemm/htp as HTP's fraction of the bound) and the issue's
targets for ViT-L/16 bf16 (>= 1.3x eager, >= 1.0x compile).

    python3 bench/gpu_block.py --htp-run gpu-bundle/bin/htp-run \\
        --blocks gpu-bundle/blocks --only vit_b16_f32_tp1,vit_l16_bf16_tp1 \\
        --timm-check --no-compile --csv gpu-block.csv
Exits 77 without torch/timm or a GPU, 1 when an htp-run fails or a
comparison is out of tolerance.
"""
import argparse
import csv
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile


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


COLUMNS = ["block", "variant", "model", "dtype", "batch", "htp_ms", "eager_ms", "compile_ms", "gemm_ms",
           "x_eager", "x_compile", "gemm_fraction", "check_error", "timm_error",
           "timm_own_error", "kernel_mb", "kernel_bound_mb", "device"]
# htp-run --check's tolerances, used for the comparison with timm too; an f32
# block at a reduced --matmul-precision is held to the second table.
TOLERANCE = {"f32": 1e-4, "bf16": 2e-2}
PRECISION_TOLERANCE = {"tf32": 4e-3, "bf16": 2e-2}
TORCH_PRECISION = {"f32": "highest", "tf32": "high", "bf16": "medium"}


def htp_run(args, block, extra):
    cmd = [args.htp_run, block["file"], "--device", "cuda", "--report", "json", *extra]
    if args.matmul_precision != "f32":
        cmd += ["--matmul-precision", args.matmul_precision]
    print("$ " + " ".join(cmd), flush=True)
    env = dict(os.environ, **dict(item.split("=", 1) for item in args.htp_env))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def write_safetensors(path, tensors):
    """name -> float32 NumPy array, as the safetensors format lays them out (no package needed)."""
    import numpy as np
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(blob)))
        handle.write(blob)
        for array in tensors.values():
            handle.write(np.ascontiguousarray(array, dtype="<f4").tobytes())


def timm_block(torch, block):
    """timm's Block as gen_vit.py writes it (eps 1e-6, exact GELU, qkv bias), seeded, with
    random layer-norm parameters so that they are exercised too (f32, on the CPU)."""
    from functools import partial
    from timm.models.vision_transformer import Block
    torch.manual_seed(0)
    module = Block(block["dim"], block["heads"], mlp_ratio=block["mlp"] / block["dim"],
                   qkv_bias=True, norm_layer=partial(torch.nn.LayerNorm, eps=1e-6))
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "norm" in name:
                param.copy_((1.0 if name.endswith("weight") else 0.0)
                            + 0.1 * torch.randn_like(param))
    return module.eval()


def timm_check(torch, args, block, module, x, dtype, scratch):
    """htp-run with the Block's weights and x against the Block in float64; also times htp and
    checks it against the CPU. Returns (report, htp error, timm's own error in dtype)."""
    import copy
    import numpy as np
    # A bf16 block rounds what it is given: everything starts from the rounded values
    # (Module.to works in place, so the module itself holds them from here on).
    module.to(dtype).float()
    x_q = x.to(dtype).float()
    weights = os.path.join(scratch, "weights.safetensors")
    x_path, y_path = os.path.join(scratch, "x.npy"), os.path.join(scratch, "y.npy")
    write_safetensors(weights, {f"blocks.0.{name}": p.detach().numpy()
                                for name, p in module.named_parameters()})
    np.save(x_path, x_q.numpy().astype("<f4"))
    extra = ["--iters", str(args.iters), "--warmup", str(args.warmup), "--weights", weights,
             "--input", x_path, "--output", y_path]
    if not args.no_check:
        extra.append("--check")
    report = htp_run(args, block, extra)
    y = torch.from_numpy(np.load(y_path)).cuda().double()
    with torch.no_grad():
        ref = copy.deepcopy(module).double().cuda()(x_q.double().cuda())
        own = copy.deepcopy(module).to(dtype).cuda()(x_q.to(dtype).cuda()).double()
    scale = ref.abs().max().item()
    error = (y - ref).abs().max().item() / scale
    own_error = (own - ref).abs().max().item() / scale
    for path in (weights, x_path, y_path):
        os.remove(path)
    del ref, own, y
    return report, error, own_error


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
    parser.add_argument("--only", default="", help="comma-separated block names (file stems)")
    parser.add_argument("--csv", default="gpu-block.csv")
    parser.add_argument("--append", action="store_true", help="add rows to an existing --csv")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--no-check", action="store_true", help="skip the CPU --check")
    parser.add_argument("--timm-check", action="store_true",
                        help="run htp-run on timm's weights and compare with timm in float64")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--htp-env", action="append", default=[], metavar="VAR=VALUE",
                        help="set in htp-run's environment only (repeatable), e.g. "
                             "HTP_CUDA_LINEAR_EPILOGUE=pass; the rows' variant column "
                             "lists them")
    parser.add_argument("--matmul-precision", choices=["f32", "tf32", "bf16"], default="f32",
                        help="htp-run --matmul-precision, and PyTorch's counterpart (the "
                             "docstring)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the blocks and htp-run exist, print what would run, stop")
    args = parser.parse_args()
    for item in args.htp_env:
        if "=" not in item or not item.split("=", 1)[0]:
            parser.error(f"--htp-env {item!r}: expected VAR=VALUE")
    variant = ",".join(args.htp_env + ([f"matmul_precision={args.matmul_precision}"]
                                       if args.matmul_precision != "f32" else [])) or "default"
    listing = os.path.join(args.blocks, "blocks.txt")
    if not os.path.isfile(listing):
        parser.error(f"--blocks {args.blocks}: no blocks.txt there (scripts/gpu-prepare.sh "
                     "writes the folder)")
    blocks = [b for b in read_blocks(args.blocks) if b["tp"] == 1]
    if not blocks:
        print(f"gpu_block: {listing} lists no tp-1 block")
        return 1
    if args.only:
        wanted = set(args.only.split(","))
        blocks = [b for b in blocks if os.path.basename(b["file"])[:-3] in wanted]
        missing = wanted - {os.path.basename(b["file"])[:-3] for b in blocks}
        if missing:
            print(f"gpu_block: no tp-1 block {', '.join(sorted(missing))} in "
                  f"{args.blocks}/blocks.txt")
            return 1
    if args.dry_run:
        if not os.access(args.htp_run, os.X_OK):
            print(f"gpu_block: {args.htp_run} is not an executable")
            return 1
        for block in blocks:
            if not os.path.isfile(block["file"]):
                print(f"gpu_block: {block['file']} is missing")
                return 1
            steps = ["htp-run --device cuda" + ("" if args.no_check else " --check")
                     + (" on timm's weights vs float64" if args.timm_check else ""),
                     "timm eager", *([] if args.no_compile else ["torch.compile"]), "GEMM bound"]
            print(f"dry run: {os.path.basename(block['file'])} ({block['model']} {block['dtype']}, "
                  f"batch {block['batch']}): {', '.join(steps)}")
        return 0
    try:
        import torch
        import timm
    except ImportError as error:
        print(f"gpu_block: {error.name} not installed: skipped")
        return 77
    if not torch.cuda.is_available():
        print("gpu_block: no CUDA device: skipped")
        return 77
    torch.set_float32_matmul_precision(TORCH_PRECISION[args.matmul_precision])
    torch.backends.cudnn.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, {props.multi_processor_count} SMs; PyTorch {torch.__version__}, "
          f"timm {timm.__version__}; {args.iters} iterations after {args.warmup} warm-up, medians",
          flush=True)
    fmt = lambda v: "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
    new_file = not (args.append and os.path.exists(args.csv) and os.path.getsize(args.csv) > 0)
    handle = open(args.csv, "w" if new_file else "a", newline="")
    writer = csv.DictWriter(handle, fieldnames=COLUMNS)
    if new_file:
        writer.writeheader()
        handle.flush()
    scratch = tempfile.mkdtemp(prefix="gpu_block.")
    results, failed = [], 0
    for block in blocks:
        name = os.path.basename(block["file"])
        dtype = torch.float32 if block["dtype"] == "f32" else torch.bfloat16
        row = {"block": name, "variant": variant, "model": block["model"], "dtype": block["dtype"],
               "batch": block["batch"], "device": props.name}
        module = timm_block(torch, block)
        x = torch.randn(block["batch"], block["tokens"], block["dim"])
        try:
            if args.timm_check:
                report, row["timm_error"], row["timm_own_error"] = timm_check(
                    torch, args, block, module, x, dtype, scratch)
                tolerance = (PRECISION_TOLERANCE[args.matmul_precision]
                             if block["dtype"] == "f32" and args.matmul_precision != "f32"
                             else TOLERANCE[block["dtype"]])
                verdict = "ok" if row["timm_error"] <= tolerance else "OUT OF TOLERANCE"
                print(f"timm {name}: htp {row['timm_error']:.2e}, timm {block['dtype']} "
                      f"{row['timm_own_error']:.2e} against timm float64 (tol {tolerance:g}): "
                      f"{verdict}", flush=True)
                if verdict != "ok":
                    failed += 1
            else:
                report = htp_run(args, block, ["--iters", str(args.iters), "--warmup",
                                               str(args.warmup)]
                                 + ([] if args.no_check else ["--check"]))
            row["htp_ms"] = report["median_ms"]
            # What the kernels kept of their own, against the compiler's bound
            # (htp-run fails the run when it is exceeded).
            if report.get("kernel_memory_held_bytes") is not None:
                row["kernel_mb"] = report["kernel_memory_held_bytes"] / 1e6
            if report.get("kernel_memory_bytes") is not None:
                row["kernel_bound_mb"] = report["kernel_memory_bytes"] / 1e6
            if not args.no_check:
                results_ = (report.get("check") or {}).get("results", [])
                row["check_error"] = max((r["error"] for r in results_), default=None)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError, OSError) as error:
            print(f"gpu_block: {name}: {error}", flush=True)
            failed += 1
        module = module.cuda().to(dtype)
        x = x.cuda().to(dtype)
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
        writer.writerow({c: row.get(c, "") for c in COLUMNS})
        handle.flush()
        print("row " + " ".join(f"{c}={fmt(row.get(c))}" for c in COLUMNS[:-1]), flush=True)
        module = x = compiled = None  # frees the GPU memory before the next block
        torch.cuda.empty_cache()
    handle.close()
    os.rmdir(scratch)

    print("| " + " | ".join(COLUMNS[:-1]) + " |")
    print("|" + "---|" * (len(COLUMNS) - 1))
    for row in results:
        print("| " + " | ".join(fmt(row.get(c)) for c in COLUMNS[:-1]) + " |")
    for row in results:
        if row["model"] == "vit_l16" and row["dtype"] == "bf16" and "x_eager" in row:
            ok_eager = row["x_eager"] >= 1.3
            ok_compile = row.get("x_compile", 0) >= 1.0
            print(f"target ViT-L/16 bf16: {row['x_eager']:.2f}x eager (>= 1.3: "
                  f"{'met' if ok_eager else 'MISSED'})" + (
                      f", {row['x_compile']:.2f}x torch.compile (>= 1.0: "
                      f"{'met' if ok_compile else 'MISSED'})" if "x_compile" in row else ""))
    print(f"wrote {args.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

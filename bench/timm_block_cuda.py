#!/usr/bin/env python3
"""bench/timm_block_cuda.py - timm's ViT Block on a CUDA GPU: a reference line per dtype.

The same shapes as bench/cuda_kernels.cu (default ViT-B/16: batch 8, 197
tokens, dim 768, 12 heads, MLP 3072), timed like it: CUDA events around
each forward after warm-up, the L2 flushed before each. f32 runs with TF32
switched off, so PyTorch's GEMMs run in plain FP32 as the CUDA twins'
cuBLAS calls do; bf16 runs the same Block with its weights and input cast
to torch.bfloat16 (PyTorch accumulates its bf16 GEMMs in f32, as the twins
do). With both dtypes it also prints the bf16 output's max relative error
against the f32 output, max|y_bf16 - y_f32| / max|y_f32|, the figure the
bf16 contract asks of HTP's own block (<= 3e-2).
Prints one line per dtype; exits 77 when torch, timm or a GPU is missing.

    python3 bench/timm_block_cuda.py [--dtype f32|bf16|both] [--batch 8] [--tokens 197]
                                     [--dim 768] [--heads 12] [--mlp 3072] [--repeats 20]
"""
import argparse
import statistics
import sys


def time_block(torch, block, x, warmup, repeats, flush):
    """Median and best forward time in ms, and the last output."""
    times = []
    y = None
    with torch.no_grad():
        for i in range(warmup + repeats):
            flush.fill_(i & 0xFF)
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            y = block(x)
            stop.record()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(stop))
    times.sort()
    return statistics.median(times), times[0], y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("f32", "bf16", "both"), default="both")
    for name, default in (("batch", 8), ("tokens", 197), ("dim", 768), ("heads", 12),
                          ("mlp", 3072), ("repeats", 20), ("warmup", 3)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    if args.repeats < 1 or args.warmup < 0 or args.dim % args.heads:
        parser.error("--repeats must be >= 1, --warmup >= 0, --dim a multiple of --heads")
    try:
        import torch
        from timm.models.vision_transformer import Block
        import timm
    except ImportError as error:
        print(f"timm_block_cuda: {error.name} not installed: skipped")
        return 77
    if not torch.cuda.is_available():
        print("timm_block_cuda: no CUDA device: skipped")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    block = Block(args.dim, args.heads, mlp_ratio=args.mlp / args.dim, qkv_bias=True)
    block = block.cuda().eval()
    x = torch.randn(args.batch, args.tokens, args.dim, device="cuda")
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * max(getattr(props, "L2_cache_size", 0), 1 << 20), dtype=torch.uint8,
                        device="cuda")
    dtypes = ("f32", "bf16") if args.dtype == "both" else (args.dtype,)
    outputs = {}
    for dtype in dtypes:
        torch_dtype = torch.float32 if dtype == "f32" else torch.bfloat16
        median, best, outputs[dtype] = time_block(
            torch, block.to(torch_dtype), x.to(torch_dtype), args.warmup, args.repeats, flush)
        note = "f32 (no TF32)" if dtype == "f32" else "bf16 (f32 accumulate)"
        print(f"timm_block {dtype:<4} PyTorch {torch.__version__} eager, timm {timm.__version__} "
              f"Block, {props.name}, b{args.batch} t{args.tokens} d{args.dim} h{args.heads} "
              f"m{args.mlp} {note}: median {median:.4f} ms, min {best:.4f} ms "
              f"({args.repeats} repeats, L2 flushed before each)")
    if len(outputs) == 2:
        reference = outputs["f32"].double()
        error = (outputs["bf16"].double() - reference).abs().max() / reference.abs().max()
        print(f"timm_block bf16 vs f32: max relative error {error.item():.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

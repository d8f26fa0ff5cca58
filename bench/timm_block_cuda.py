#!/usr/bin/env python3
"""bench/timm_block_cuda.py - timm's ViT Block on a CUDA GPU: a reference line.

The same shapes as bench/cuda_kernels.cu (default ViT-B/16: batch 8, 197
tokens, dim 768, 12 heads, MLP 3072, f32), timed like it: CUDA events around
each forward after warm-up, the L2 flushed before each. TF32 is switched off,
so PyTorch's GEMMs run in plain FP32 as the CUDA twins' cuBLAS calls do.
Prints one line; exits 77 when torch, timm or a GPU is missing.

    python3 bench/timm_block_cuda.py [--batch 8] [--tokens 197] [--dim 768]
                                     [--heads 12] [--mlp 3072] [--repeats 20]
"""
import argparse
import statistics
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("batch", 8), ("tokens", 197), ("dim", 768), ("heads", 12),
                          ("mlp", 3072), ("repeats", 20), ("warmup", 3)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
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
    times = []
    with torch.no_grad():
        for i in range(args.warmup + args.repeats):
            flush.fill_(i & 0xFF)
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            block(x)
            stop.record()
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(start.elapsed_time(stop))
    times.sort()
    print(f"timm_block   PyTorch {torch.__version__} eager, timm {timm.__version__} Block, "
          f"{props.name}, b{args.batch} t{args.tokens} d{args.dim} h{args.heads} m{args.mlp} "
          f"f32 (no TF32): median {statistics.median(times):.4f} ms, min {times[0]:.4f} ms "
          f"({args.repeats} repeats, L2 flushed before each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

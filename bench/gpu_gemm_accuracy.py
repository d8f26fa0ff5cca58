#!/usr/bin/env python3
"""bench/gpu_gemm_accuracy.py - how far a bf16 GEMM's f32 accumulation on this GPU's
tensor cores strays, as the CUDA kernel tests' tolerance model needs it (issue 23).

For each K: x[M, K] in U[-1, 1], w[N, K] in U[-1/sqrt K, 1/sqrt K], b[N] in U[-0.5, 0.5],
all rounded to bf16 (the kernel tests' linear case), against float64. Per output
element, err / (u * L1) where u = 2^-24 and L1 = |x|·|w|ᵀ + |b|: the accumulation
error in f32 unit roundoffs of the terms' magnitudes. Rows: bf16 in, f32 out
(torch.mm out_dtype, where this torch has it: the accumulator alone) and bf16 in, bf16
out (F.linear, as cuBLAS rounds it; the half-ulp of the output taken off first).
max / sqrt(K) and max / K say whether the error grows as a random walk or linearly;
mean signed says whether it is biased (truncation). Needs a CUDA GPU and torch.
"""
import argparse
import math
import sys


def main():
    # The arguments first: --help works without torch.
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as error:
        print(f"gpu_gemm_accuracy: needs torch ({error})", file=sys.stderr)
        return 1

    def bf16(t):
        return t.to(torch.bfloat16)

    if not torch.cuda.is_available():
        print("gpu_gemm_accuracy: no CUDA GPU")
        return 77
    torch.manual_seed(0)
    u = 2.0 ** -24
    m, n = 2048, 1024
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, M {m}, N {n}")
    print("case                K     max/(uL1)  p99.9   max/sqrtK  max/K   mean signed")
    for k in (64, 192, 768, 1024, 3072, 4096):
        reach = 1.0 / math.sqrt(k)
        x = bf16(torch.rand(m, k, device="cuda") * 2 - 1)
        w = bf16((torch.rand(n, k, device="cuda") * 2 - 1) * reach)
        b = bf16(torch.rand(n, device="cuda") - 0.5)
        xd, wd, bd = x.double(), w.double(), b.double()
        ref = xd @ wd.T + bd
        l1 = xd.abs() @ wd.abs().T + bd.abs()
        cases = []
        try:
            y32 = torch.mm(x, w.T, out_dtype=torch.float32) + b.float()
            cases.append(("bf16->f32 (mm)", (y32.double() - ref), 0))
        except (TypeError, RuntimeError) as error:
            print(f"  torch.mm out_dtype: {error}".splitlines()[0][:100])
        for reduced in (True, False):
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = reduced
            y = F.linear(x, w, b).double()
            half_ulp = torch.ldexp(torch.ones_like(ref), torch.frexp(ref)[1] - 9)
            excess = (y - ref).abs() - half_ulp
            cases.append((f"bf16->bf16 rr={int(reduced)}", excess.clamp(min=0) * torch.sign(y - ref), 1))
        for name, err, _ in cases:
            r = (err / (u * l1)).flatten()
            a = r.abs()
            mx = a.max().item()
            p = torch.quantile(a[:: max(1, a.numel() // 1000000)].float(), 0.999).item()
            print(f"{name:18s} {k:5d} {mx:10.1f} {p:8.1f} {mx / math.sqrt(k):9.2f} {mx / k:7.3f} "
                  f"{r.mean().item():+9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

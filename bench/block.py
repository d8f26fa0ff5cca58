#!/usr/bin/env python3
"""Forward time of one ViT block: htp-run vs its GEMM-only bound and NumPy.

Runs, one after the other in the same invocation (so the ratios share the
machine's state):
  htp-run        the block through the JIT (--report json, median of --iters)
  GEMM bound     build/bench/htp-bench-gemm: the block's GEMMs alone, through
                 the same BLAS calls (no norms, softmax, GELU, bias, residual);
                 a second row times its four big linears alone (kernels/cpu
                 computes the per-head q·kᵀ and p·v in its own fused loop, not
                 through BLAS, so that row is the stricter floor)
  NumPy f32      test/ref/vit_ref.py's forward in float32, with a vectorised
                 erf (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7) instead of the
                 reference's exact per-element math.erf
  PyTorch eager  timm's vision_transformer.Block (LayerNorm eps 1e-6, qkv bias,
                 exact GELU) with the same weights, torch.no_grad, on torch's
                 default threads (the same cores), when torch and timm import
  torch.compile  the same module through torch.compile (inductor), timed after
                 its compile in the warm-up
and prints a Markdown table of median ms and ratios to htp-run, then the two
figures of issue 7 (htp-run's speed relative to PyTorch eager and to the
GEMM-only bound; >= 1.0 and >= 0.9 are the targets). Without torch or timm the
PyTorch rows say "not installed"; --no-compile skips torch.compile (it needs
a C++ compiler and a minute or more on a small machine).

    bench/block.py --build build --iters 10       # ViT-B/16: d=768, 12 heads, 197 tokens, batch 8

--dtype bf16 instead gives issue 7's bf16 figure: the same block generated in
f32 and in bf16 (gen_vit.py --dtype), run by htp-run from ONE F32 weights file
(the bf16 run rounds it on load) and one <f4 input, with weights like a
trained block's (check_e2e.random_weights: unit-ish norms, W ~ N(0, 1/in));
it prints both times and the max relative error max|y - y_ref| / max|y_ref|
of the bf16 output against htp's f32 output (target <= 3e-2) and against the
float64 NumPy reference; with torch and timm, also timm's Block run in bf16
(.to(torch.bfloat16)) on the same weights, its error against the same f32
output, and its eager time, and (unless --no-compile) the same bf16 module
through torch.compile.

    bench/block.py --build build --dtype bf16 --iters 5
    bench/block.py --build build --dtype bf16 --iters 10 --rounds 5   # + alternating rounds
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "ref"))
import vit_ref  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "bench"))
import train_policies  # noqa: E402  (the argument checks, run_command)
from train_policies import htp_run_report, int_from, run_command  # noqa: E402


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


def blas_of(build):
    """The BLAS the build links: HTP_BLAS in its CMake cache, else OpenBLAS unless
    HTP_WITH_OPENBLAS is off (the plain C SGEMM)."""
    cache = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as lines:
            for line in lines:
                if "=" in line and ":" in line.split("=", 1)[0]:
                    key, value = line.split("=", 1)
                    cache[key.split(":", 1)[0]] = value.strip()
    except OSError:
        return "unknown BLAS"
    if cache.get("HTP_BLAS"):
        return cache["HTP_BLAS"]
    return "plain" if cache.get("HTP_WITH_OPENBLAS", "ON").upper() in ("OFF", "0", "FALSE") else "openblas"


def add_block_arguments(parser):
    """The build, the timing and the block's shape (ViT-B/16, batch 8, by
    default): this benchmark's and bench/matmul_precision.py's."""
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder")
    parser.add_argument("--iters", type=int_from(1), default=10)
    parser.add_argument("--warmup", type=int_from(0), default=2)
    parser.add_argument("--batch", type=int_from(1), default=8)
    parser.add_argument("--tokens", type=int_from(1), default=197)
    parser.add_argument("--dim", type=int_from(1), default=768)
    parser.add_argument("--heads", type=int_from(1), default=12)
    parser.add_argument("--mlp", type=int_from(1), default=3072)


def block_shape(args):
    """gen_vit.py's arguments for one block of args' shape."""
    return ["--depth", "1", "--dim", str(args.dim), "--heads", str(args.heads), "--mlp",
            str(args.mlp), "--tokens", str(args.tokens), "--batch", str(args.batch)]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_block_arguments(parser)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--rounds", type=int_from(1), default=1,
                        help="bf16: this many alternating rounds of htp-run and PyTorch eager, "
                             "and the median of their ratios")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                        help="bf16: the bf16 block's time and its error against f32 (above)")
    args = parser.parse_args()
    train_policies.check_build(parser, args.build, os.path.join("tools", "htp-run", "htp-run"),
                               *([] if args.dtype == "bf16" else
                                 [os.path.join("bench", "htp-bench-gemm")]))
    train_policies.check_gen_vit(parser, block_shape(args) + ["--dtype", args.dtype])
    if args.dtype == "bf16":
        return main_bf16(args)

    shape = block_shape(args)
    with tempfile.TemporaryDirectory() as tmp:
        block = os.path.join(tmp, "block.mlir")
        run_command([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), *shape,
                     "-o", block])
        out = run_command([os.path.join(args.build, "tools", "htp-run", "htp-run"), block,
                           "--iters", str(args.iters), "--warmup", str(args.warmup),
                           "--report", "json"], capture_output=True, text=True)
    htp = htp_run_report(out)
    out = run_command([os.path.join(args.build, "bench", "htp-bench-gemm"), "--batch",
                       str(args.batch), "--tokens", str(args.tokens), "--dim", str(args.dim),
                       "--heads", str(args.heads), "--mlp", str(args.mlp), "--iters",
                       str(args.iters), "--warmup", str(args.warmup)],
                      capture_output=True, text=True)
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
    numpy_ms = median_ms(lambda: forward_numpy(x, weights, args), args.iters, args.warmup)

    rows = [("htp-run (JIT)", htp["median_ms"]),
            (f"GEMM-only bound ({htp.get('gemm_provider') or blas_of(args.build)})", gemm["median_ms"]),
            ("its four linears alone (qkv, proj, fc1, fc2)", gemm["linears_median_ms"]),
            ("NumPy f32", numpy_ms)]
    eager_ms = None
    try:
        import torch
        import timm  # noqa: F401
    except ImportError as error:
        rows.append(("PyTorch eager (timm Block)", f"not installed ({error.name})"))
        rows.append(("torch.compile (timm Block)", f"not installed ({error.name})"))
    else:
        block_module, xt = timm_block(torch, x, weights, args)
        check = float(np.max(np.abs(forward_numpy(x, weights, args) - run_torch(torch, block_module, xt))))
        eager_ms = median_ms(lambda: forward_torch(torch, block_module, xt), args.iters, args.warmup)
        rows.append((f"PyTorch {torch.__version__} eager (timm {timm.__version__} Block)", eager_ms))
        if args.no_compile:
            rows.append(("torch.compile (timm Block)", "skipped (--no-compile)"))
        else:
            _, compiled_ms, compile_s = time_compiled(torch, block_module, xt, args)
            rows.append(("torch.compile (timm Block" +
                         (f"; compiled in {compile_s:.0f} s)" if compile_s is not None else ")"),
                         compiled_ms))

    base = htp["median_ms"]
    print(f"shape: batch {args.batch}, tokens {args.tokens}, dim {d}, heads {args.heads}, "
          f"mlp {m}; {args.iters} iterations after {args.warmup} warm-up; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}\n")
    print("| what | median ms | ratio to htp-run |")
    print("|---|---|---|")
    for name, ms in rows:
        if isinstance(ms, str):
            print(f"| {name} | {ms} | — |")
        else:
            print(f"| {name} | {ms:.1f} | {ms / base:.2f} |")
    print(f"\nhtp-run: {htp['gflops']:.1f} GFLOP/s; GEMM bound: {gemm['gflops']:.1f} GFLOP/s")
    print(f"htp-run speed / GEMM-only bound: {gemm['median_ms'] / base:.2f} (target >= 0.9); "
          f"/ its four linears alone: {gemm['linears_median_ms'] / base:.2f}")
    if eager_ms is not None:
        print(f"htp-run speed / PyTorch eager: {eager_ms / base:.2f} (target >= 1.0); "
              f"timm vs NumPy max |difference| {check:.2e}; torch threads "
              f"{torch.get_num_threads()}")


def relative_error(y, reference):
    """max |y - reference| / max |reference|, in float64."""
    reference = np.asarray(reference, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(y, dtype=np.float64) - reference)) /
                 np.max(np.abs(reference)))


def main_bf16(args):
    import check_e2e  # test/ref, on the path above
    shape = block_shape(args)
    rng = np.random.default_rng(0)
    weights = check_e2e.random_weights(rng, 1, args.dim, args.mlp)
    x = rng.standard_normal((args.batch, args.tokens, args.dim)).astype(np.float32)
    htp_run = os.path.join(args.build, "tools", "htp-run", "htp-run")
    outputs, reports, versus_timm = {}, {}, None
    with tempfile.TemporaryDirectory() as tmp:
        weights_path, x_path = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "x.npy")
        check_e2e.write_safetensors(weights_path, weights)
        np.save(x_path, x)
        for dtype in ("f32", "bf16"):
            block, y_path = os.path.join(tmp, f"{dtype}.mlir"), os.path.join(tmp, f"{dtype}.npy")
            run_command([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), *shape,
                         "--dtype", dtype, "-o", block])
            out = run_command([htp_run, block, "--weights", weights_path, "--input", x_path,
                               "--output", y_path, "--iters", str(args.iters), "--warmup",
                               str(args.warmup), "--report", "json"],
                              capture_output=True, text=True)
            reports[dtype] = htp_run_report(out)
            outputs[dtype] = np.load(y_path)
        rounds = bf16_rounds(args, htp_run, [block, "--weights", weights_path, "--input", x_path],
                             x, weights) if args.rounds > 1 else None
    reference = vit_ref.vit_blocks(x, weights, 1, args.heads)  # float64, exact erf
    y32, y16 = outputs["f32"], outputs["bf16"]
    rows = [("htp-run f32 (JIT)", reports["f32"]["median_ms"], relative_error(y32, reference),
             "—"),
            ("htp-run bf16 (JIT; linears and the attention on oneDNN bf16 matmuls where built, fc1 with GELU as its post-op, norms in f32 a block at a time)", reports["bf16"]["median_ms"],
             relative_error(y16, reference), relative_error(y16, y32))]
    try:
        import torch
        import timm  # noqa: F401
    except ImportError as error:
        rows.append(("PyTorch eager, timm Block in bf16", f"not installed ({error.name})", "—",
                     "—"))
    else:
        module, xt = timm_block(torch, x, weights, args)
        module, xt = module.to(torch.bfloat16), xt.to(torch.bfloat16)

        y_timm = run_torch(torch, module, xt)
        eager_ms = median_ms(lambda: forward_torch(torch, module, xt), args.iters, args.warmup)
        rows.append((f"PyTorch {torch.__version__} eager, timm {timm.__version__} Block in bf16",
                     eager_ms, relative_error(y_timm, reference), relative_error(y_timm, y32)))
        versus_timm = relative_error(y16, y_timm)
        if args.no_compile:
            rows.append(("torch.compile, timm Block in bf16", "skipped (--no-compile)", "—", "—"))
        else:
            y_compiled, compiled_ms, compile_s = time_compiled(torch, module, xt, args)
            if y_compiled is None:
                rows.append(("torch.compile, timm Block in bf16", compiled_ms, "—", "—"))
            else:
                rows.append((f"torch.compile, timm Block in bf16 (compiled in {compile_s:.0f} s)",
                             compiled_ms, relative_error(y_compiled, reference),
                             relative_error(y_compiled, y32)))
    print(f"shape: batch {args.batch}, tokens {args.tokens}, dim {args.dim}, heads {args.heads}, "
          f"mlp {args.mlp}; weights check_e2e.random_weights (seed 0); {args.iters} iterations "
          f"after {args.warmup} warm-up; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
    print("| what | median ms | max rel. error vs f64 NumPy | max rel. error vs htp-run f32 |")
    print("|---|---|---|---|")
    for name, ms, to_reference, to_f32 in rows:
        cells = [f"{ms:.1f}" if isinstance(ms, float) else ms] + [
            f"{v:.2e}" if isinstance(v, float) else v for v in (to_reference, to_f32)]
        print(f"| {name} | {' | '.join(cells)} |")
    error = relative_error(y16, y32)
    htp_ms = reports["bf16"]["median_ms"]
    peers = [(name, ms) for name, ms, _, _ in rows[2:] if isinstance(ms, float)]
    if peers:
        print("\nhtp-run bf16 speed / " + ", / ".join(
            f"{name.split(',')[0]}: {ms / htp_ms:.2f}" for name, ms in peers) + " (this run)")
    print(f"\nbf16 vs f32 (htp-run, same weights): max relative error {error:.2e} "
          f"(target <= 3e-2): {'met' if error <= 3e-2 else 'NOT met'}")
    if versus_timm is not None:
        print(f"htp-run bf16 vs timm's Block in bf16: max |y_htp - y_timm| / max |y_timm| = "
              f"{versus_timm:.2e}")
    if rounds:
        print(f"\n{args.rounds} alternating rounds (htp-run bf16, then PyTorch eager bf16, "
              f"{args.iters} iterations each): PyTorch ms / htp-run ms per round: "
              f"{', '.join(f'{t / h:.2f} ({t:.1f} / {h:.1f})' for h, t in rounds)}; median "
              f"{statistics.median(t / h for h, t in rounds):.2f} (target >= 1.0)")
    return 0 if error <= 3e-2 else 1


def bf16_rounds(args, htp_run, block_args, x, weights):
    """(htp-run bf16 median ms, PyTorch eager bf16 median ms) per round, the two
    back to back so that the shared machine's load hits both alike; [] without
    torch and timm."""
    try:
        import torch
        import timm  # noqa: F401
    except ImportError:
        return []
    module, xt = timm_block(torch, x, weights, args)
    module, xt = module.to(torch.bfloat16), xt.to(torch.bfloat16)

    pairs = []
    for _ in range(args.rounds):
        out = run_command([htp_run, *block_args, "--iters", str(args.iters), "--warmup",
                           str(args.warmup), "--report", "json"], capture_output=True, text=True)
        pairs.append((htp_run_report(out)["median_ms"],
                      median_ms(lambda: forward_torch(torch, module, xt), args.iters,
                                args.warmup)))
    return pairs


def forward_numpy(x, weights, args):
    return vit_ref.vit_blocks(x, weights, 1, args.heads, dtype=np.float32, erf=erf_vectorised)


def timm_block(torch, x, weights, args):
    """timm's ViT Block with this benchmark's weights (strict: every key used)."""
    import functools
    from timm.models.vision_transformer import Block
    block = Block(dim=args.dim, num_heads=args.heads, mlp_ratio=args.mlp / args.dim,
                  qkv_bias=True, norm_layer=functools.partial(torch.nn.LayerNorm, eps=1e-6))
    state = {k[len("blocks.0."):]: torch.from_numpy(v) for k, v in weights.items()}
    block.load_state_dict(state, strict=True)
    return block.eval(), torch.from_numpy(x)


def forward_torch(torch, module, xt):
    """What the PyTorch rows time: the forward alone (no conversion to NumPy)."""
    with torch.no_grad():
        return module(xt)


def run_torch(torch, module, xt):
    return forward_torch(torch, module, xt).float().numpy()


def time_compiled(torch, module, xt, args):
    """torch.compile(module) on xt: (its output, median ms, seconds its compile took), or
    (None, "failed (...)", None) where inductor cannot compile (no C++ toolchain): said in
    the table, the other rows still run."""
    try:
        compiled = torch.compile(module)
        start = time.perf_counter()
        y = run_torch(torch, compiled, xt)
        compile_s = time.perf_counter() - start
        return y, median_ms(lambda: forward_torch(torch, compiled, xt), args.iters,
                            args.warmup), compile_s
    except Exception as error:
        why = " ".join(str(error).split())[:80].replace("|", "/")  # one table cell
        return None, f"failed ({type(error).__name__}: {why})", None


if __name__ == "__main__":
    sys.exit(main())

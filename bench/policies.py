#!/usr/bin/env python3
"""Straggler policies on the real executor: htp-run on tp ranks, one slowed.

Runs, in one invocation, the same ViT block split over --tp ranks:
  baseline   no straggler, policy none, before and after the others
             (their mean is T0)
  none       rank 1 slowed --factor times, no balancing
  resize     the straggler prunes γ of its units (approximate)
  migrate    the straggler hands γ of its units to fast ranks (exact)
  semi       worst stragglers migrate, mild ones resize
and reports each policy's steady iteration time (median of the second half
of the iterations: detection and the one-off weight transfer come first)
against the ideal, T0 · tp / Σ speeds (perfect balance of the same work over
ranks of speed 1 and 1/factor, nothing pruned), plus --check's error.

--slow stretches the rank's compute by sleeping (factor-1) × its measured
compute, so with one BLAS thread per rank and tp ≤ cores each rank has its
own core and the slow one behaves like a slower device.

--factor takes a comma-separated list (one table per slowdown). --plot
OUT.png also draws the comparison: per slowdown, one bar per policy with
its steady time over the ideal (1 = perfectly balanced), labelled with
--check's max relative error (round-off for the exact policies).

    OPENBLAS_NUM_THREADS=1 bench/policies.py --build build --tp 2 --factor 3
    OPENBLAS_NUM_THREADS=1 bench/policies.py --tp 2 --factor 2,4 --plot policies.png
    OPENBLAS_NUM_THREADS=1 bench/policies.py --tp 2 --factor 3 --dtype bf16
"""
import argparse
import math
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import train_policies  # noqa: E402  (the argument checks, run_command)
from train_policies import check_out_file, htp_run_report, int_from, run_command  # noqa: E402


def run(htp_run, block, args, extra):
    cmd = [htp_run, block, "--tp", str(args.tp), "--iters", str(args.iters), "--warmup", "1",
           "--report", "json", *extra]
    out = run_command(cmd, capture_output=True, text=True)
    report = htp_run_report(out)
    times = report["times_ms"]
    steady = statistics.median(times[len(times) // 2:])
    return steady, report


POLICIES = ["none", "resize", "migrate", "semi"]


def factors(text):
    """--factor: one slowdown or a comma-separated list, each >= 1."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of numbers")
    if not values or any(not math.isfinite(v) or v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}': every slowdown must be a number >= 1")
    return values


def plot(results, args, path):
    """Grouped bars: per slowdown, each policy's steady time over the ideal."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    colors = {"none": "#9c9c9c", "resize": "#f28e2b", "migrate": "#e15759", "semi": "#4e79a7"}
    width = 0.8 / len(POLICIES)
    figure, axis = plt.subplots(figsize=(max(9.0, 3.0 * len(results) + 3), 5.0))
    tallest = 1.0
    for g, (factor, base, ideal, rows) in enumerate(results):
        for k, (policy, steady, error) in enumerate(rows):
            ratio = steady / ideal
            tallest = max(tallest, ratio)
            x = g + (k - (len(rows) - 1) / 2) * width
            axis.bar(x, ratio, width, color=colors.get(policy, "0.5"),
                     label=policy if g == 0 else None)
            label = f"{ratio:.2f}"
            if error is not None:
                label += f"\nerr {error:.1e}"
            axis.annotate(label, (x, ratio), xytext=(0, 2), textcoords="offset points",
                          ha="center", va="bottom", fontsize=7)
    axis.axhline(1.0, color="black", linestyle="--", linewidth=1,
                 label="ideal (balanced, nothing pruned)")
    axis.set_xticks(range(len(results)))
    axis.set_xticklabels([f"rank 1 slowed {factor:g}x\nideal {ideal:.1f} ms"
                          for factor, base, ideal, rows in results])
    axis.set_ylim(0, tallest * 1.25)
    axis.set_ylabel("steady time per iteration / ideal")
    axis.set_title(f"Straggler policies on htp-run: tp {args.tp}, {args.dtype} ViT block depth {args.depth}, "
                   f"dim {args.dim}, batch {args.batch}, tokens {args.tokens}\nbar: median of "
                   f"the last {args.iters - args.iters // 2} iterations over the ideal; "
                   f"err: --check's max relative error", fontsize=10)
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    figure.tight_layout()
    figure.savefig(path, dpi=args.dpi, format="png")
    plt.close(figure)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--tp", type=int_from(1), default=2)
    parser.add_argument("--factor", type=factors, default=[3.0],
                        help="slowdown of rank 1, or a comma-separated list (default 3)")
    parser.add_argument("--iters", type=int_from(1), default=30)
    parser.add_argument("--batch", type=int_from(1), default=8)
    parser.add_argument("--tokens", type=int_from(1), default=197)
    parser.add_argument("--dim", type=int_from(1), default=768)
    parser.add_argument("--heads", type=int_from(1), default=12)
    parser.add_argument("--mlp", type=int_from(1), default=3072)
    parser.add_argument("--depth", type=int_from(1), default=1)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                        help="the block's tensors (bf16: its bf16 balance hooks; --check's "
                             "tolerance is then bf16's)")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="also draw the comparison as a PNG (needs matplotlib)")
    parser.add_argument("--dpi", type=int, default=100, help="resolution of --plot (default 100)")
    args = parser.parse_args()
    if args.tp < 2:
        parser.error(f"--tp {args.tp}: needs at least 2 ranks (rank 1 is the one slowed)")
    if args.plot:
        # Fail before the runs, not after them.
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error(f"--plot needs matplotlib, which {sys.executable} lacks (Debian: "
                         "apt-get install python3-matplotlib)")
        check_out_file(parser, "--plot", args.plot)
        if not 20 <= args.dpi <= 600:
            parser.error(f"--dpi {args.dpi}: must be between 20 and 600")

    train_policies.check_build(parser, args.build, os.path.join("tools", "htp-run", "htp-run"))
    shape = ["--depth", str(args.depth), "--dim", str(args.dim), "--heads", str(args.heads),
             "--mlp", str(args.mlp), "--tokens", str(args.tokens), "--batch", str(args.batch),
             "--dtype", args.dtype]
    train_policies.check_gen_vit(parser, shape)

    htp_run = os.path.join(args.build, "tools", "htp-run", "htp-run")
    with tempfile.TemporaryDirectory() as tmp:
        block = os.path.join(tmp, "block.mlir")
        run_command([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), *shape,
                     "-o", block])
        # The baseline before and after the policies: the machine drifts.
        base_before, _ = run(htp_run, block, args, [])
        measured = []
        for factor in args.factor:
            rows = []
            for policy in POLICIES:
                steady, report = run(htp_run, block, args,
                                     ["--policy", policy, "--slow", f"1:{factor!r}", "--check"])
                check = report.get("check") or {}
                error = max((r["error"] for r in check.get("results", [])), default=None)
                rows.append((policy, steady, error))
            measured.append((factor, rows))
        base_after, _ = run(htp_run, block, args, [])
    base = (base_before + base_after) / 2
    results = []
    for factor, rows in measured:
        speeds = [1.0] * args.tp
        speeds[1] = 1.0 / factor
        results.append((factor, base, base * args.tp / sum(speeds), rows))

    for factor, base, ideal, rows in results:
        print(f"ViT block ({args.dtype}): depth {args.depth}, batch {args.batch}, tokens "
              f"{args.tokens}, dim {args.dim}, heads {args.heads}, mlp {args.mlp}; tp {args.tp}, rank 1 slowed "
              f"{factor:g}x; {args.iters} iterations, steady = median of the last "
              f"{args.iters - args.iters // 2}; OPENBLAS_NUM_THREADS="
              f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
        print(f"baseline (no straggler) {base:.1f} ms (before {base_before:.1f}, after "
              f"{base_after:.1f}); ideal with the straggler {ideal:.1f} ms\n")
        print("| policy | steady ms | / ideal | / baseline | --check max rel. error |")
        print("|---|---|---|---|---|")
        for policy, steady, error in rows:
            err = "—" if error is None else f"{error:.2e}"
            print(f"| {policy} | {steady:.1f} | {steady / ideal:.2f} | {steady / base:.2f} | "
                  f"{err} |")
        print()
    if args.plot:
        plot(results, args, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()

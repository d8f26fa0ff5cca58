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

    OPENBLAS_NUM_THREADS=1 bench/policies.py --build build --tp 2 --factor 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(htp_run, block, args, extra):
    cmd = [htp_run, block, "--tp", str(args.tp), "--iters", str(args.iters), "--warmup", "1",
           "--report", "json", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    report = json.loads(out.stdout)
    times = report["times_ms"]
    steady = statistics.median(times[len(times) // 2:])
    return steady, report


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--factor", type=float, default=3.0, help="slowdown of rank 1")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=197)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--mlp", type=int, default=3072)
    parser.add_argument("--depth", type=int, default=1)
    args = parser.parse_args()

    htp_run = os.path.join(args.build, "tools", "htp-run", "htp-run")
    with tempfile.TemporaryDirectory() as tmp:
        block = os.path.join(tmp, "block.mlir")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"),
                        "--depth", str(args.depth), "--dim", str(args.dim), "--heads",
                        str(args.heads), "--mlp", str(args.mlp), "--tokens", str(args.tokens),
                        "--batch", str(args.batch), "-o", block], check=True)
        # The baseline before and after the policies: the machine drifts.
        base_before, _ = run(htp_run, block, args, [])
        rows = []
        for policy in ["none", "resize", "migrate", "semi"]:
            steady, report = run(htp_run, block, args,
                                 ["--policy", policy, "--slow", f"1:{args.factor}", "--check"])
            check = report.get("check") or {}
            error = max((r["error"] for r in check.get("results", [])), default=None)
            rows.append((policy, steady, error))
        base_after, _ = run(htp_run, block, args, [])
    base = (base_before + base_after) / 2
    speeds = [1.0] * args.tp
    speeds[1] = 1.0 / args.factor
    ideal = base * args.tp / sum(speeds)

    print(f"ViT block: depth {args.depth}, batch {args.batch}, tokens {args.tokens}, dim "
          f"{args.dim}, heads {args.heads}, mlp {args.mlp}; tp {args.tp}, rank 1 slowed "
          f"{args.factor}x; {args.iters} iterations, steady = median of the last "
          f"{args.iters - args.iters // 2}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
    print(f"baseline (no straggler) {base:.1f} ms (before {base_before:.1f}, after "
          f"{base_after:.1f}); ideal with the straggler {ideal:.1f} ms\n")
    print("| policy | steady ms | / ideal | / baseline | --check max rel. error |")
    print("|---|---|---|---|---|")
    for policy, steady, error in rows:
        err = "—" if error is None else f"{error:.2e}"
        print(f"| {policy} | {steady:.1f} | {steady / ideal:.2f} | {steady / base:.2f} | {err} |")


if __name__ == "__main__":
    main()

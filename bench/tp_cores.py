#!/usr/bin/env python3
"""Does --tp N cost speed on a machine with few cores? (issue 6, item 8)

Runs htp-run on the same block at --tp 1 and at each --tp N, with htp-run's
default BLAS threads (each rank gets max(1, cores / N) OpenBLAS threads: the
script unsets OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and GOTO_NUM_THREADS so
that htp-run decides), alternating the runs so that a noisy neighbour hits
every setting alike. Prints the median of each setting's per-run medians and
the ratio to --tp 1 (above 1: faster than tp 1 with the default). With
--env-threads K,..., also runs every tp with OPENBLAS_NUM_THREADS=K set by
the user (htp-run then leaves BLAS alone): K = 1 is the old advice, K = the
core count is what every rank got before htp-run shared the cores out.

  /usr/bin/python3 bench/tp_cores.py                 # ViT-B/16 block, tp 1 vs 2
  /usr/bin/python3 bench/tp_cores.py --tp 2,4 --rounds 5 --env-threads 1,2
"""
import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from train_policies import (  # noqa: E402
    check_executable, check_in_file, htp_run_report, int_from, run_command)


def int_list(low, high):
    """An argparse type: comma-separated whole numbers from low to high."""
    one = int_from(low, high)

    def parse(text):
        return [one(item) for item in text.split(",")]
    return parse


def run(htp_run, block, tp, iters, env_threads):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS")}
    if env_threads:
        env["OPENBLAS_NUM_THREADS"] = str(env_threads)
    out = run_command([htp_run, block, "--tp", str(tp), "--iters", str(iters), "--warmup", "2",
                       "--report", "json"], f"htp-run --tp {tp}", env=env, capture_output=True,
                      text=True)
    report = htp_run_report(out)
    return report["median_ms"], report.get("blas_threads")


def main():
    parser = argparse.ArgumentParser(description=__doc__,  # its examples too
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block", default=os.path.join(ROOT, "examples/vit_b16_block.mlir"))
    parser.add_argument("--htp-run", default=os.path.join(ROOT, "build/tools/htp-run/htp-run"))
    parser.add_argument("--tp", type=int_list(1, 1024), default=[2],
                        help="comma-separated tp values (1 to 1024) to compare with 1")
    parser.add_argument("--iters", type=int_from(1), default=10, help="timed iterations per run")
    parser.add_argument("--rounds", type=int_from(1), default=3, help="alternating rounds")
    parser.add_argument("--env-threads", type=int_list(1, 1024), default=[],
                        help="comma-separated OPENBLAS_NUM_THREADS values (1 to 1024) to run "
                        "each tp with too")
    args = parser.parse_args()
    check_executable(parser, "--htp-run", args.htp_run)
    check_in_file(parser, "--block", args.block)
    tps = [1] + [t for t in dict.fromkeys(args.tp) if t != 1]
    settings = [(tp, 0) for tp in tps]
    for k in dict.fromkeys(args.env_threads):
        settings += [(tp, k) for tp in tps]
    medians = {s: [] for s in settings}
    threads = {}
    for _ in range(args.rounds):
        for s in settings:
            ms, blas = run(args.htp_run, args.block, s[0], args.iters, s[1])
            medians[s].append(ms)
            threads[s] = blas
    base = statistics.median(medians[(1, 0)])
    print(f"{os.path.basename(args.block)}, {os.cpu_count()} cores, {args.rounds} rounds x "
          f"{args.iters} iterations; ratio = tp 1 (default threads) / setting")
    print(f"| setting | BLAS threads per rank | median ms | speed vs tp 1 |")
    print(f"|---|---|---|---|")
    for s in settings:
        m = statistics.median(medians[s])
        label = f"--tp {s[0]}" + (f" OPENBLAS_NUM_THREADS={s[1]}" if s[1] else "")
        print(f"| {label} | {threads[s]} | {m:.1f} | {base / m:.2f} |")


if __name__ == "__main__":
    main()

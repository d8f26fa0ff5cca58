#!/usr/bin/env python3
"""bench/gpu_policies.py - straggler policies on one GPU, the straggler slow in hardware (issue 8 item 5).

The tp-4 ViT-B/16 block of gpu-blocks/ (scripts/gpu-prepare.sh) on one GPU,
ranks as threads (local backend), each rank confined to its own SMs with
htp-run --sms (green contexts, disjoint):
  baseline     every rank on --fast SMs (default 24), policy none: T0
  straggler    rank 0 on --slow SMs (default 8: a third of a fast rank), the others on
               --fast, once per policy of --policies (default none, resize,
               migrate, semi; none is always run: the slowdown comes from
               its trace), traced
  no straggler semi with every rank on --fast: its cost when nobody lags
  shares       (--shares-block: the block compiled with uneven shares, e.g. htp-compile
               --shares=1,3,3,3) the straggler's SMs as above, policy none then semi: the
               split redrawn once for the mixed fleet (issue 27) against migrating
Steady time: the median of the second half of the iterations (detection and
the one-off weight transfer come first). The straggler's real slowdown f is
measured, not assumed: from policy none's trace, the median over the second
half of rank 0's hook seconds over the other ranks' mean. Ideal: T0 * 4 /
(3 + 1/f), perfect balance of the same work, nothing pruned; and per kind,
where a rank is slowed unevenly: T0 less the baseline's slowest attention
and MLP hooks A_k, plus A_k * 4 / (3 + 1/f_k) for each (the all-reduces and
what no clock sees kept as they were); and per kind with whole units, the
per-kind ideal where a pair's units move whole (the least max over ranks of
units x per-unit time over integer splits: the best an exact plan can do;
12 heads over 4 ranks leave no split of 11 heads among 3 ranks under 4).
Prints a table
(steady ms, / ideal, / T0), the issue's targets (SEMI <= 1.05x ideal; no
straggler: SEMI <= 1.02x policy none; when semi runs), writes policies.csv,
and draws semi's trace with tools/htp-plot/htp-plot (trace_semi.png), all in
--out. Per traced policy the table also splits the steady time: the slowest rank's
attention and MLP hooks (each pair ends in an all-reduce, so a site balanced on its own
matters, not a rank's sum), the busiest rank's compute + communication, and what is left
(on an H200 on 2026-11-27 about 1.2 ms per iteration). With --reference (the same
block compiled for tp 1) every policy's last output is compared with tp 1's under the same
seed: none, migrate and semi must agree within --tolerance (1e-5; migration is exact, the
sums' order aside) unless the last iteration's plan pruned (resize, or semi's mild
stragglers: reported, marked pruned); a mismatch exits 1. Each run's steady
time is printed as it finishes. With semi among the policies, one more semi run with
the straggler under --profile (--profile-iters) splits each rank's time into its hooks,
its collectives (with the bias and residual adds that follow a row-parallel layer's sum
and the next half-layer's norm of it: each rank adds and normalises the rows it sums;
and the block's first norm, whose rows the ranks share too) and the work every rank
does whole (none left in a ViT block): rank 0's excess of the last over its peers' is
time no plan can move, beside SEMI's excess over the ideal.

    python3 bench/gpu_policies.py --htp-run gpu-bundle/bin/htp-run \\
        --block gpu-bundle/blocks/vit_b16_f32_tp4.so --out gpu-policies --policies none,semi
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from train_policies import int_from, number_from  # noqa: E402  (the scripts' shared checks)

POLICIES = ["none", "resize", "migrate", "semi"]
TP = 4


SEED = 11
# Policies whose output must equal tp 1's (migration is exact) unless the plan the last
# iteration ran under pruned (resize always may; semi's mild stragglers resize).
EXACT = ("none", "migrate", "semi")


def run(args, sms, extra, block=None, report=False):
    """One htp-run of block (default --block); its steady time in ms (with --dry-run:
    prints the command, returns 1), or with report its whole JSON report (None on a
    dry run)."""
    cmd = [args.htp_run, block or args.block, "--device", "cuda", "--tp", str(TP), "--iters",
           str(args.iters), "--warmup", "1", "--report", "json", "--seed", str(SEED), *extra]
    for rank, count in enumerate(sms):
        cmd += ["--sms", f"{rank}:{count}"]
    print("$ " + " ".join(cmd), flush=True)
    if args.dry_run:
        return None if report else 1.0
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()[-600:]}")
    if report:
        return json.loads(out.stdout)
    times = json.loads(out.stdout)["times_ms"]
    steady = statistics.median(times[len(times) // 2:])
    print(f"  steady {steady:.3f} ms", flush=True)
    return steady


def reference(args):
    """The tp-1 block's output for SEED on the GPU (--reference), or None."""
    if not args.reference:
        return None
    path = os.path.join(args.out, "tp1.npy")
    cmd = [args.htp_run, args.reference, "--device", "cuda", "--iters", "1", "--warmup", "0",
           "--seed", str(SEED), "--output", path]
    print("$ " + " ".join(cmd), flush=True)
    if args.dry_run:
        return None
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise RuntimeError(f"the tp-1 reference: exit {out.returncode}: {out.stderr.strip()[-600:]}")
    return path


def relative_error(path, reference_path):
    """max |y - y_tp1| / max |y_tp1| (numpy imported only here: --dry-run needs none)."""
    import numpy as np
    got, want = np.load(path).astype(np.float64), np.load(reference_path).astype(np.float64)
    if got.shape != want.shape:
        raise RuntimeError(f"{path}: shape {got.shape}, tp 1's {want.shape}")
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def pruned_at_end(trace_path):
    """Whether the plan the run's last iteration computed under pruned any unit (the
    trace's line i holds the plan decided at the end of iteration i)."""
    with open(trace_path) as handle:
        rows = [json.loads(line) for line in handle]
    last = max(row["iter"] for row in rows)
    return any(sum(row.get("pruned") or [0, 0]) > 0 for row in rows if row["iter"] >= last - 1)


def slowdown(trace_path, kind=None):
    """Rank 0's hook seconds over the others' mean, median over the second half: both
    kinds together, or one (0 heads, 1 MLP units)."""
    per_iter = {}
    with open(trace_path) as handle:
        for line in handle:
            row = json.loads(line)
            sites = row.get("site_seconds") or [row.get("seconds", 0), 0]
            sites = sites if kind is None else [sites[kind]]
            per_iter.setdefault(row["iter"], {})[row["rank"]] = sum(s or 0 for s in sites)
    ratios = []
    iters = sorted(per_iter)
    for i in iters[len(iters) // 2:]:
        ranks = per_iter[i]
        others = [ranks[r] for r in ranks if r != 0]
        if 0 in ranks and others and statistics.mean(others) > 0:
            ratios.append(ranks[0] / statistics.mean(others))
    return statistics.median(ratios) if ratios else float("nan")


def breakdown(trace_path):
    """Where a traced run's iteration goes, medians over the second half: the slowest
    rank's attention and MLP hook seconds (each pair ends in an all-reduce, so these add),
    and the busiest rank's compute + communication, all in ms. The steady wall time minus
    the last is what no rank's clock saw (launches, synchronisation, the balancer's step)."""
    per_iter = {}
    with open(trace_path) as handle:
        for line in handle:
            row = json.loads(line)
            per_iter.setdefault(row["iter"], []).append(row)
    iters = sorted(per_iter)[len(per_iter) // 2:]
    def median_of(value):
        return 1e3 * statistics.median(max(value(row) for row in per_iter[i]) for i in iters)
    sites = lambda k: (lambda row: (row.get("site_seconds") or [0, 0])[k] or 0)
    return (median_of(sites(0)), median_of(sites(1)),
            median_of(lambda row: row["seconds"] + row["comm_seconds"]))


CALL_KINDS = ("hooks", "collectives", "replicated")


def call_kind(name):
    """Which part of a hooked block an entry of htp-run's profile is: a balance hook (the
    units a plan moves), a collective (its own work, the adds and the norm an all-reduce
    takes, a group layer norm's rows, and its wait for the others), or work every rank
    does whole (what the compiler could not share: none in a ViT block)."""
    if name.startswith("htp_rt_"):
        return "hooks"
    if any(word in name for word in ("allreduce", "allgather", "broadcast", "barrier",
                                     "send", "recv", "group_layer_norm")):
        return "collectives"
    return "replicated"


def profile_split(report):
    """A --profile report's per-rank median ms per iteration by call_kind: a dict of
    kind -> [ms of rank 0, rank 1, ...] (the medians of each call summed)."""
    calls = report["profile"]["calls"]
    ranks = len(calls[0]["median_ms"]) if calls else 0
    split = {kind: [0.0] * ranks for kind in CALL_KINDS}
    for call in calls:
        for rank, ms in enumerate(call["median_ms"]):
            split[call_kind(call["name"])][rank] += ms or 0.0
    return split


def units_per_rank(trace_path):
    """The units each rank owns per kind ([heads, MLP units]), from a trace's "owned"."""
    with open(trace_path) as handle:
        for line in handle:
            owned = json.loads(line).get("owned")
            if owned:
                return owned
    raise RuntimeError(f"{trace_path}: no \"owned\" units in the trace")


def whole_units_time(units, unit_ms, factor, tp=TP):
    """The least time one pair can take when its units move whole: min over integer
    splits u_0 + ... = tp * units of max_r u_r * c_r, c_r = unit_ms on a fast rank and
    unit_ms * factor on the straggler, rank 0 (a time T holds floor(T / c_r) units on
    rank r; the least T that holds them all is one of the u * c_r)."""
    costs = [unit_ms * factor] + [unit_ms] * (tp - 1)
    total = tp * units
    candidates = sorted({u * c for c in costs for u in range(total + 1)})
    fits = lambda t: sum(int(t / c + 1e-9) for c in costs) >= total
    return next(t for t in candidates if fits(t))


def straggler_speeds(trace_path):
    """Rank 0's speed as the detector saw it and per kind of unit ([heads, MLP units], the
    trace's kind_speeds), medians over the second half; None where the trace has none."""
    rows = []
    with open(trace_path) as handle:
        for line in handle:
            row = json.loads(line)
            if row["rank"] == 0:
                rows.append(row)
    rows = sorted(rows, key=lambda row: row["iter"])[len(rows) // 2:]
    def median_of(values):
        values = [v for v in values if isinstance(v, (int, float))]
        return statistics.median(values) if values else None
    kinds = [row.get("kind_speeds") or [None, None] for row in rows]
    return (median_of(row.get("speed") for row in rows), median_of(k[0] for k in kinds),
            median_of(k[1] for k in kinds))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--htp-run", required=True)
    parser.add_argument("--block", default=os.path.join("gpu-blocks", "vit_b16_f32_tp4.so"))
    parser.add_argument("--out", default="gpu-policies", help="folder for traces, CSV, picture")
    # 4 x 24: an H100 or H200 splits 120 of its 132 SMs into groups of 8, so 4 x 32 does not fit.
    parser.add_argument("--fast", type=int_from(1, 1024), default=24, help="SMs of each fast rank")
    parser.add_argument("--slow", type=int_from(1, 1024), default=8, help="SMs of the straggler, rank 0")
    parser.add_argument("--iters", type=int_from(1), default=30)
    parser.add_argument("--timeout", type=number_from(0, above=True), default=240)
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated policies to run with the straggler")
    parser.add_argument("--reference", default=None,
                        help="the same block compiled for tp 1: every policy's output is "
                             "compared with it (none, migrate and semi within --tolerance)")
    parser.add_argument("--tolerance", type=number_from(0, above=True), default=1e-5)
    parser.add_argument("--shares-block", default=None,
                        help="the block compiled with uneven shares for the slow rank (run "
                             "under the same SMs, policy none and semi; its output against "
                             "tp 1's too)")
    parser.add_argument("--profile-iters", type=int_from(0), default=10,
                        help="iterations of the profiled semi run with the straggler (where "
                             "rank 0's time goes by kind of call; 0: none)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the htp-run commands instead of running them")
    args = parser.parse_args()
    policies = ["none"] + [p for p in POLICIES if p != "none" and p in args.policies.split(",")]
    unknown = set(args.policies.split(",")) - set(POLICIES)
    if unknown:
        parser.error(f"--policies: unknown {', '.join(sorted(unknown))} (of {', '.join(POLICIES)})")
    if args.dry_run and not (os.access(args.htp_run, os.X_OK) and os.path.isfile(args.block)):
        print(f"gpu_policies: no executable {args.htp_run} or no {args.block}")
        return 1
    os.makedirs(args.out, exist_ok=True)
    fast, slow = [args.fast] * TP, [args.slow] + [args.fast] * (TP - 1)
    try:
        tp1 = reference(args)
        base = run(args, fast, ["--policy", "none", "--trace",
                                os.path.join(args.out, "trace_base.jsonl")])
        rows, errors = [], {}
        for policy in policies:
            trace = os.path.join(args.out, f"trace_{policy}.jsonl")
            output = os.path.join(args.out, f"y_{policy}.npy")
            rows.append((policy, run(args, slow, ["--policy", policy, "--trace", trace,
                                                  "--output", output])))
            if tp1:
                errors[policy] = (relative_error(output, tp1), pruned_at_end(trace))
        quiet_semi = run(args, fast, ["--policy", "semi"]) if "semi" in policies else None
        # Each call waited for before the next (slower than the runs above, whose times
        # stand): what rank 0 spends on work no plan moves, against its peers.
        profiled = None
        if "semi" in policies and args.profile_iters > 0:
            profiled = run(argparse.Namespace(**{**vars(args), "iters": args.profile_iters}),
                           slow, ["--policy", "semi", "--profile"], report=True)
        for policy in (("none", "semi") if args.shares_block else ()):
            name = f"shares-{policy}"
            trace = os.path.join(args.out, f"trace_{name}.jsonl")
            output = os.path.join(args.out, f"y_{name}.npy")
            rows.append((name, run(args, slow, ["--policy", policy, "--trace", trace,
                                                "--output", output], args.shares_block)))
            if tp1:
                errors[name] = (relative_error(output, tp1), pruned_at_end(trace))
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"gpu_policies: {error}")
        return 1
    if args.dry_run:
        return 0
    factor = slowdown(os.path.join(args.out, "trace_none.jsonl"))
    ideal = base * TP / (TP - 1 + 1 / factor)
    # Per kind: each pair balanced on its own at its own slowdown, the rest of T0 (the
    # all-reduces, what no clock saw) as it was; a rank slowed unevenly (heads 2.0x, MLP
    # units 2.8x on an H200) has no one factor.
    factors = [slowdown(os.path.join(args.out, "trace_none.jsonl"), k) for k in (0, 1)]
    base_sites = breakdown(os.path.join(args.out, "trace_base.jsonl"))[:2]
    ideal_kinds = base - sum(base_sites) + sum(
        a * TP / (TP - 1 + 1 / f) for a, f in zip(base_sites, factors))
    # Whole units: the per-kind ideal with each pair's units moved whole (what an exact
    # plan can reach: 12 heads over 4 ranks at ViT-B/16 cannot split 11 three and two
    # thirds ways), the baseline's per-unit times from its slowest hooks.
    owned = units_per_rank(os.path.join(args.out, "trace_base.jsonl"))
    whole = base - sum(base_sites) + sum(
        whole_units_time(n, a / n, f) for a, n, f in zip(base_sites, owned, factors))
    print(f"\n{os.path.basename(args.block)}, tp {TP} on one GPU; fast ranks {args.fast} SMs, "
          f"rank 0 {args.slow} SMs: measured slowdown {factor:.2f}x (heads {factors[0]:.2f}x, "
          f"MLP units {factors[1]:.2f}x); T0 {base:.2f} ms (slowest attention "
          f"{base_sites[0]:.2f}, MLP {base_sites[1]:.2f}); ideal {ideal:.2f} ms with one "
          f"factor, {ideal_kinds:.2f} ms per kind (the rest of T0 kept), {whole:.2f} ms per "
          f"kind with whole units ({owned[0]} heads and {owned[1]} MLP units a rank, moved "
          f"whole: the best an exact plan can do); steady = median of "
          f"the last {args.iters - args.iters // 2} of {args.iters} iterations\n")
    print("| policy | steady ms | / ideal | / ideal per kind | / whole units | / T0 | "
          "slowest attention ms | slowest MLP ms | busiest compute + comm ms | unaccounted ms |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for policy, steady in rows:
        attention, mlp, busiest = breakdown(os.path.join(args.out, f"trace_{policy}.jsonl"))
        print(f"| {policy} | {steady:.2f} | {steady / ideal:.3f} | {steady / ideal_kinds:.3f} | "
              f"{steady / whole:.3f} | {steady / base:.3f} | {attention:.2f} | {mlp:.2f} | "
              f"{busiest:.2f} | {steady - busiest:.2f} |")
    if quiet_semi is not None:
        print(f"| semi, no straggler | {quiet_semi:.2f} | — | — | — | {quiet_semi / base:.3f} | | "
              f"| | |")
    fmt = lambda v: "—" if v is None else f"{v:.2f}"
    print("\nrank 0's speed (median, second half): " + "; ".join(
        f"{policy} {fmt(one)} (heads {fmt(heads)}, MLP units {fmt(mlp)})"
        for policy, _ in rows
        for one, heads, mlp in [straggler_speeds(os.path.join(args.out,
                                                                f"trace_{policy}.jsonl"))]))
    with open(os.path.join(args.out, "policies.csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["case", "steady_ms", "ideal_ms", "ideal_per_kind_ms",
                         "whole_units_ms", "t0_ms", "slowdown", "fast_sms", "slow_sms"])
        for policy, steady in rows:
            writer.writerow([policy, steady, ideal, ideal_kinds, whole, base, factor,
                             args.fast, args.slow])
        if quiet_semi is not None:
            writer.writerow(["semi_no_straggler", quiet_semi, "", "", "", base, "", args.fast,
                             args.fast])
    exact = EXACT + ("shares-none", "shares-semi")
    wrong = [p for p in exact
             if p in errors and not errors[p][1] and not errors[p][0] <= args.tolerance]
    if errors:
        print("\noutputs against tp 1 (max |y - y_tp1| / max |y_tp1|, the last iteration's): " +
              ", ".join(f"{p} {e:.1e}" + (" (pruned)" if pruned else "")
                        for p, (e, pruned) in errors.items()) +
              f"; unpruned none, migrate and semi within {args.tolerance:g}: " +
              ("met" if not wrong else "FAILED (" + ", ".join(wrong) + ")"))
    if quiet_semi is None:
        return 1 if wrong else 0
    semi = dict(rows)["semi"]
    print(f"\ntarget SEMI <= 1.05x ideal: {semi / ideal:.3f} "
          f"({'met' if semi / ideal <= 1.05 else 'MISSED'}; per kind {semi / ideal_kinds:.3f}, "
          f"{'met' if semi / ideal_kinds <= 1.05 else 'MISSED'}; per kind with whole units "
          f"{semi / whole:.3f}, {'met' if semi / whole <= 1.05 else 'MISSED'}); "
          f"no straggler SEMI <= 1.02x none: "
          f"{quiet_semi / base:.3f} ({'met' if quiet_semi / base <= 1.02 else 'MISSED'})")
    if profiled:
        split = profile_split(profiled)
        ranks = range(len(split["hooks"]))
        print(f"\nsemi with the straggler, profiled ({args.profile_iters} iterations, each call "
              "waited for before the next), ms per iteration by kind of call:\n"
              "| kind | " + " | ".join(f"rank {r}" for r in ranks) + " |\n"
              "|---|" + "---|" * len(ranks))
        for kind in CALL_KINDS:
            print(f"| {kind} | " + " | ".join(f"{ms:.3f}" for ms in split[kind]) + " |")
        replicated = split["replicated"]
        peers = statistics.mean(replicated[1:]) if len(replicated) > 1 else replicated[0]
        # rank 0's excess is time every rank waits for at the all-reduces and no plan moves
        print(f"replicated work a step: rank 0 {replicated[0]:.3f} ms, peers {peers:.3f} "
              f"(excess {replicated[0] - peers:.3f}); SEMI over ideal {semi - ideal:.3f} ms")
    picture = os.path.join(args.out, "trace_semi.png")
    plot = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "htp-plot", "htp-plot"),
                           os.path.join(args.out, "trace_semi.jsonl"), "-o", picture,
                           "--title", f"semi, tp {TP} on one GPU, rank 0 on {args.slow} of "
                           f"{args.fast} SMs"], capture_output=True, text=True)
    print(f"trace picture: {picture}" if plot.returncode == 0 else
          f"htp-plot failed: {plot.stderr.strip()[-300:]}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

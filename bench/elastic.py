#!/usr/bin/env python3
"""Issue 27's experiment (b): training with a rank killed mid-epoch and
brought back later. The block is split at tp with spare room (so the
survivors can hold a lost rank's units) and trained from one seed on
Fashion-MNIST:
  fault-free     no fault, --elastic K (snapshots only: their cost)
  no-snapshots   no fault, no --elastic (the plain run's time)
  lost+back      --fault die:R@D (mid-epoch) and --fault rejoin:R@B, --elastic K
for K chosen by htp-run (--elastic 0) and K given. For each: wall seconds
of the run (htp-run's process, start to end), the steps replayed after the
death, how long after the old world ended the new one's first step
started, snapshots and their cost, and the final test accuracy against
the fault-free run's.

    bench/elastic.py --htp-run build/tools/htp-run/htp-run --out bench/out/elastic

Writes DIR/table.md and prints it.
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_policies  # noqa: E402  (write_model, the argument checks, run_command)
from train_policies import int_from  # noqa: E402


def run(a, model, name, flags):
    command = [a.htp_run, model, "--train", "--tp", str(a.tp), "--spare", str(a.spare),
               "--epochs", str(a.epochs), "--limit-train", str(a.limit_train), "--limit-test",
               str(a.limit_test), "--seed", "1", "--lr", "2e-3"] + flags
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    done = train_policies.run_command(command, name, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    epochs = [line for line in done.stdout.splitlines() if line.startswith("epoch")]
    found = re.search(r"test acc ([0-9.]+)%", epochs[-1]) if epochs else None
    if not found:
        raise SystemExit(f"{name}: {a.htp_run} printed no epoch line with a test accuracy: "
                         "is it htp-run?")
    acc = float(found.group(1))
    replayed = sum(int(m) for m in re.findall(r"\((\d+) steps? replayed\)", done.stderr))
    resumed = [float(m) for m in re.findall(r"first step started ([0-9.]+) s after", done.stderr)]
    snap = re.search(r"(\d+) snapshots? every (\d+) steps \(([^)]*)\), ([0-9.e+-]+) ms each, "
                     r"([0-9.e+-]+) %", done.stderr)
    return {"wall": wall, "acc": acc, "replayed": replayed, "resumed": resumed,
            "snapshots": snap.groups() if snap else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--htp-run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--depth", type=int_from(1), default=2)
    p.add_argument("--dim", type=int_from(1), default=112)
    p.add_argument("--heads", type=int_from(1), default=28)
    p.add_argument("--mlp", type=int_from(1), default=196)
    p.add_argument("--tp", type=int_from(2, 1024), default=4)
    p.add_argument("--spare", type=int_from(0, 1000), default=50,
                   help="percent: room for a lost rank's units")
    p.add_argument("--epochs", type=int_from(1), default=4)
    p.add_argument("--limit-train", type=int_from(1), default=12800)
    p.add_argument("--limit-test", type=int_from(1), default=2000)
    p.add_argument("--rank", type=int_from(0), default=1, help="the rank that dies and comes back")
    p.add_argument("--die", type=int_from(1), default=310,
                   help="the step it dies at (mid-epoch 2)")
    p.add_argument("--back", type=int_from(1), default=500, help="the step it comes back at")
    p.add_argument("--k", type=int_from(1), default=50,
                   help="the given K of the second pair of runs")
    a = p.parse_args()
    if a.rank >= a.tp:
        p.error(f"--rank {a.rank}: not a rank of --tp {a.tp}")
    if a.back <= a.die:
        p.error(f"--back {a.back}: must come after --die {a.die}")
    train_policies.check_executable(p, "--htp-run", a.htp_run)
    train_policies.check_out_folder(p, "--out", a.out)
    train_policies.check_gen_vit(p, train_policies.model_args(a.depth, a.dim, a.heads, a.mlp))
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(a.out, "vit.mlir")
    train_policies.write_model(model, a.depth, a.dim, a.heads, a.mlp)
    faults = ["--fault", f"die:{a.rank}@{a.die}", "--fault", f"rejoin:{a.rank}@{a.back}"]
    runs = [("no snapshots, no fault", []),
            ("--elastic 0, no fault", ["--elastic", "0"]),
            ("--elastic 0, lost and back", ["--elastic", "0"] + faults),
            (f"--elastic {a.k}, no fault", ["--elastic", str(a.k)]),
            (f"--elastic {a.k}, lost and back", ["--elastic", str(a.k)] + faults)]
    results = [(name, run(a, model, name, flags)) for name, flags in runs]
    base = results[0][1]
    lines = [f"tp {a.tp} with --spare {a.spare}; depth {a.depth}, dim {a.dim}, {a.heads} heads, "
             f"mlp {a.mlp}, batch 64; {a.epochs} epochs of {a.limit_train // 64} steps; rank "
             f"{a.rank} dies at step {a.die} and comes back at step {a.back}; wall clock",
             "",
             "| run | wall s | vs no snapshots | steps replayed | new world's first step after | "
             "snapshots (count, every K, ms each, % of steps) | test acc % |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results:
        snaps = "—"
        if r["snapshots"]:
            count, every, how, ms, share = r["snapshots"]
            snaps = f"{count}, {every} ({'chosen' if 'chosen' in how else 'given'}), {ms}, {share}"
        resumed = ", ".join(f"{1e3 * s:.0f} ms" for s in r["resumed"]) or "—"
        lines.append(f"| {name} | {r['wall']:.1f} | {r['wall'] / base['wall']:.3f} | "
                     f"{r['replayed']} | {resumed} | {snaps} | {r['acc']:.2f} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()

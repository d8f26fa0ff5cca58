#!/usr/bin/env python3
"""Issue 27's experiment (a): a mixed fleet. One rank is F times slower for
the whole run (--slow R:F from the first step); the block is trained at tp
with the split as compiled (even) under SEMI-migration's policies, and with
the split redrawn once, at compile time, in proportion to the ranks' speeds
(htp-run --shares, issue 27 item 1: rank r owns units in proportion to
1 / F_r). Migration moves work for a while and pays for it every step (in
training the migrated units' weights go out and their gradients come back
each step); uneven shares pay nothing per step.

Runs, all from the same seed (same init, same batches), on htp-run's
modelled clock (--clock cpu: a step takes its slowest rank's CPU work plus
its --slow share; bench/train_policies.py explains why):
  baseline        even split, no straggler, --policy none
  even-none       even split, the slow rank sets the pace
  even-migrate    even split, the slow rank hands units to the others
  even-semi       even split, SEMI (resize or migrate by how slow)
  shares-none     uneven shares (1 / F_r), --policy none
  shares-migrate  uneven shares, migration on top (nothing to do if they fit)
  shares-semi     uneven shares, SEMI on top (resizes what whole units leave over)

For each: modelled ms per step, its ratio to the ideal (the baseline's step
with its balance-hook share spread over the ranks by speed: T0 (1 - h) +
T0 h tp / sum_r (1 / F_r), as train_policies.py), bytes moved per step
after the first --settle steps (the weights of the migrated units out plus
their gradients back: twice the trace's moved_bytes, summed over ranks),
units handed off per step, and the final test accuracy.

    bench/mixed_fleet.py --htp-run build/tools/htp-run/htp-run --out bench/out/mixed

Writes DIR/*.json (metrics), DIR/*.jsonl (traces) and a markdown table on
stdout and in DIR/table.md.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_policies  # noqa: E402  (run, summary, hook_seconds, moved)


def moved_bytes(trace_path, from_step):
    """Mean bytes per step from from_step on, over all ranks: the weights
    a step's migration apply delivered (moved_bytes) and, in training, as
    many bytes of their gradients going back to the owners."""
    per_step = {}
    with open(trace_path) as f:
        for line in f:
            row = json.loads(line)
            if row["iter"] >= from_step:
                per_step[row["iter"]] = per_step.get(row["iter"], 0) + 2 * row.get("moved_bytes", 0)
    return sum(per_step.values()) / len(per_step) if per_step else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--htp-run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--depth", type=int, default=2)
    # 28 heads and 28 MLP units of 7 (tp 4's automatic width) split 2:2:2:1
    # into whole units exactly: the shares' rounding is not measured.
    p.add_argument("--dim", type=int, default=112)
    p.add_argument("--heads", type=int, default=28)
    p.add_argument("--mlp", type=int, default=196)
    p.add_argument("--patch", type=int, default=7)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--tp", type=int, default=4)
    p.add_argument("--factor", type=float, default=2.0, help="the slow rank's slowdown F")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--limit-train", type=int, default=12800)
    p.add_argument("--limit-test", type=int, default=2000)
    p.add_argument("--settle", type=int, default=50, help="steps before bytes are counted")
    p.add_argument("--clock", choices=["cpu", "units", "wall"], default="cpu")
    p.add_argument("--reuse", action="store_true", help="keep runs whose metrics exist")
    a = p.parse_args()
    # What train_policies.run reads from its arguments.
    a.optimizer, a.lr, a.seed, a.data = "adamw", 2e-3, 1, None
    a.ewma_alpha, a.hysteresis = 0.05, 20
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(a.out, "vit.mlir")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "gen_vit.py"), "--model",
                    "--depth", str(a.depth), "--dim", str(a.dim), "--heads", str(a.heads),
                    "--mlp", str(a.mlp), "--patch", str(a.patch), "--image", "28",
                    "--channels", "1", "--classes", "10", "--batch", str(a.batch), "-o", model],
                   check=True)
    slow_rank = a.tp - 1
    slow = ["--slow", f"{slow_rank}:{a.factor:g}"]
    # Shares in proportion to speed, in whole numbers: 1 / F_r of 10.
    shares = ",".join(str(round(10 / (a.factor if r == slow_rank else 1.0))) for r in range(a.tp))
    runs = [("baseline", ["--policy", "none"]),
            ("even-none", ["--policy", "none"] + slow),
            ("even-migrate", ["--policy", "migrate"] + slow),
            ("even-semi", ["--policy", "semi"] + slow),
            ("shares-none", ["--policy", "none", "--shares", shares] + slow),
            ("shares-migrate", ["--policy", "migrate", "--shares", shares] + slow),
            ("shares-semi", ["--policy", "semi", "--shares", shares] + slow)]
    results = {}
    for name, flags in runs:
        metrics, trace = train_policies.run(a, name, flags, model)
        results[name] = (train_policies.summary(metrics), trace, metrics)
    base, base_trace, base_metrics = results["baseline"]
    step_s = base["ms_step"] / 1e3
    hooks = train_policies.hook_seconds(base_trace, a.tp, train_policies.mean)
    h = min(1.0, hooks / step_s) if step_s > 0 else 0.0
    speeds = [1.0 / (a.factor if r == slow_rank else 1.0) for r in range(a.tp)]
    ideal_ms = base["ms_step"] * ((1 - h) + h * a.tp / sum(speeds))
    lines = [f"tp {a.tp}, rank {slow_rank} {a.factor:g}x slower for the whole run; shares "
             f"{shares}; depth {a.depth}, dim {a.dim}, {a.heads} heads, mlp {a.mlp}, batch "
             f"{a.batch}; {a.epochs} epochs of {base_metrics['steps_per_epoch']} steps; "
             f"--clock {a.clock}; hooks {100 * h:.0f} % of the baseline's step; ideal "
             f"{ideal_ms:.2f} ms/step",
             "",
             "| run | ms/step | x ideal | bytes moved/step (after step "
             f"{a.settle}) | units handed off/step (heads, MLP) | test acc % |",
             "|---|---|---|---|---|---|"]
    for name, _ in runs:
        s, trace, _ = results[name]
        _, sent = train_policies.moved(trace, from_step=a.settle)
        lines.append(f"| {name} | {s['ms_step']:.2f} | {s['ms_step'] / ideal_ms:.3f} | "
                     f"{moved_bytes(trace, a.settle):,.0f} | {sent[0]:.2f}, {sent[1]:.2f} | "
                     f"{s['acc']:.2f} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()

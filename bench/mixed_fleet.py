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
  spare-migrate   even split with --spare room, migration until the run-time
                  re-partition (--repartition, default 2) moves the units for good
  spare-semi      the same under SEMI
  reload          even split under SEMI for the first epoch, then the split redrawn
                  from live state the Tenplex way: a checkpoint at the epoch's end,
                  a new process that compiles the shares and resumes from it (its
                  one-off cost: the two runs' wall time outside their epochs)

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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_policies  # noqa: E402  (run, summary, hook_seconds, moved, the argument checks)
from train_policies import int_from, number_from  # noqa: E402


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


def repartitions(trace_path):
    """The run-time re-partitions in a trace: (step, bytes sent, seconds on
    the slowest rank) for each (the first line after one says what each rank
    sent and received in it and how long it took there)."""
    done = {}
    with open(trace_path) as f:
        for line in f:
            row = json.loads(line)
            if "repartitioned" in row:
                it = row["iter"] - 1
                moved, seconds = done.get(it, (0.0, 0.0))
                done[it] = (moved + row["repartitioned"]["bytes"] / 2,
                            max(seconds, row["repartitioned"]["seconds"]))
    return [(it, moved, seconds) for it, (moved, seconds) in sorted(done.items())]


def plot(results, names, settle, path):
    """Bytes moved per step (every rank's migrated weights in, and as many
    gradient bytes back, plus a re-partition's one move) and the slow rank's
    owned heads, step by step, for the runs in names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name in names:
        trace = results[name][1]
        moved, owned = {}, {}
        with open(trace) as f:
            for line in f:
                row = json.loads(line)
                it = row["iter"]
                moved[it] = moved.get(it, 0) + 2 * row.get("moved_bytes", 0)
                if "repartitioned" in row:  # its move, sent and received counted once each
                    moved[it - 1] = moved.get(it - 1, 0) + row["repartitioned"]["bytes"] / 2
                if row["rank"] == max(results[name][2].get("slow_rank", 0), 0) and "owned" in row:
                    owned[it] = row["owned"][0]
        steps = sorted(moved)
        top.plot(steps, [moved[i] / 1e3 for i in steps], label=name, lw=1)
        if owned:
            bottom.plot(sorted(owned), [owned[i] for i in sorted(owned)], label=name, lw=1)
    top.set_ylabel("KB moved in the step")
    top.set_yscale("symlog", linthresh=10)
    top.legend()
    bottom.set_ylabel("heads the slow rank owns")
    bottom.set_xlabel("training step")
    bottom.legend()
    fig.suptitle("a rank 2x slower at tp 4: migration pays every step, a re-partition once")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def timed(command):
    """Runs htp-run; its wall seconds."""
    print(f"[{time.strftime('%H:%M:%S')}] {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    train_policies.run_command(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return time.monotonic() - start


def reload_run(a, model, slow, shares):
    """The Tenplex-style re-partition: epoch 1 even under SEMI with a checkpoint,
    then a new process resuming it on the shares. Returns (summary over all
    epochs, trace of epoch 1, one-off seconds, steps of epoch 1)."""
    common = [a.htp_run, model, "--train", "--tp", str(a.tp), "--optimizer", a.optimizer,
              "--lr", str(a.lr), "--seed", str(a.seed), "--limit-train", str(a.limit_train),
              "--limit-test", str(a.limit_test), "--ewma-alpha", str(a.ewma_alpha),
              "--hysteresis", str(a.hysteresis), "--clock", a.clock] + slow
    checkpoint = os.path.join(a.out, "reload.safetensors")
    first, second = (os.path.join(a.out, f"reload-{i}.json") for i in (1, 2))
    trace = os.path.join(a.out, "reload-1.jsonl")
    wall = [timed(common + ["--epochs", "1", "--policy", "semi", "--checkpoint", checkpoint,
                            "--metrics", first, "--trace", trace]),
            timed(common + ["--epochs", str(a.epochs), "--policy", "none", "--shares", shares,
                            "--resume", checkpoint, "--metrics", second])]
    metrics = [json.load(open(path)) for path in (first, second)]
    inside = [sum(e["epoch_s"] + e["eval_s"] for e in m["epochs"]) for m in metrics]
    joined = dict(metrics[1])
    joined["epochs"] = metrics[0]["epochs"] + metrics[1]["epochs"]
    # The second process's start (compile, load, slice) and the first one's
    # checkpoint are what the re-partition costs once.
    one_off = sum(w - i for w, i in zip(wall, inside))
    return train_policies.summary(joined), trace, one_off, metrics[0]["steps_per_epoch"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--htp-run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--depth", type=int_from(1), default=2)
    # 28 heads and 28 MLP units of 7 (tp 4's automatic width) split 2:2:2:1
    # into whole units exactly: the shares' rounding is not measured.
    p.add_argument("--dim", type=int_from(1), default=112)
    p.add_argument("--heads", type=int_from(1), default=28)
    p.add_argument("--mlp", type=int_from(1), default=196)
    p.add_argument("--patch", type=int_from(1), default=7)
    p.add_argument("--batch", type=int_from(1), default=64)
    p.add_argument("--tp", type=int_from(2, 1024), default=4)
    p.add_argument("--factor", type=number_from(1), default=2.0,
                   help="the slow rank's slowdown F")
    p.add_argument("--epochs", type=int_from(1), default=4)
    p.add_argument("--limit-train", type=int_from(1), default=12800)
    p.add_argument("--limit-test", type=int_from(1), default=2000)
    p.add_argument("--settle", type=int_from(0), default=50,
                   help="steps before bytes are counted")
    p.add_argument("--clock", choices=["cpu", "units", "wall"], default="cpu")
    p.add_argument("--reuse", action="store_true",
                   help="keep runs whose metrics exist and were written by the same command, "
                        "finished (others run again)")
    p.add_argument("--spare", type=int_from(0, 1000), default=15,
                   help="spare room (percent) of the run-time re-partition rows")
    p.add_argument("--plot", help="also draw bytes moved and the slow rank's heads per step "
                   "(PNG; needs matplotlib)")
    a = p.parse_args()
    # What train_policies.run reads from its arguments.
    a.optimizer, a.lr, a.seed, a.data = "adamw", 2e-3, 1, None
    a.ewma_alpha, a.hysteresis = 0.05, 20
    train_policies.check_executable(p, "--htp-run", a.htp_run)
    train_policies.check_out_folder(p, "--out", a.out)
    train_policies.check_gen_vit(p, train_policies.model_args(a.depth, a.dim, a.heads, a.mlp,
                                                              a.patch, a.batch))
    if a.plot:
        train_policies.check_out_file(p, "--plot", a.plot, made_folder=a.out)
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(a.out, "vit.mlir")
    train_policies.write_model(model, a.depth, a.dim, a.heads, a.mlp, a.patch, a.batch)
    slow_rank = a.tp - 1
    slow = ["--slow", f"{slow_rank}:{a.factor!r}"]
    # Shares in proportion to speed, in whole numbers: 1 / F_r of 10.
    shares = ",".join(str(round(10 / (a.factor if r == slow_rank else 1.0))) for r in range(a.tp))
    runs = [("baseline", ["--policy", "none"]),
            ("even-none", ["--policy", "none"] + slow),
            ("even-migrate", ["--policy", "migrate"] + slow),
            ("even-semi", ["--policy", "semi"] + slow),
            ("shares-none", ["--policy", "none", "--shares", shares] + slow),
            ("shares-migrate", ["--policy", "migrate", "--shares", shares] + slow),
            ("shares-semi", ["--policy", "semi", "--shares", shares] + slow),
            ("spare-migrate", ["--policy", "migrate", "--spare", str(a.spare)] + slow),
            ("spare-semi", ["--policy", "semi", "--spare", str(a.spare)] + slow)]
    results = {}
    for name, flags in runs:
        metrics, trace = train_policies.run(a, name, flags, model)
        results[name] = (train_policies.summary(metrics), trace, metrics)
    reload_summary, reload_trace, one_off, first_steps = reload_run(a, model, slow, shares)
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
    # The reload row: bytes per step over the whole run (epoch 1 migrates,
    # then nothing moves); its one-off cost in the text.
    steps = a.epochs * base_metrics["steps_per_epoch"]
    reload_bytes = moved_bytes(reload_trace, a.settle) * (first_steps - a.settle) / steps
    lines.append(f"| reload (even + semi for epoch 1, then shares) | {reload_summary['ms_step']:.2f} | "
                 f"{reload_summary['ms_step'] / ideal_ms:.3f} | {reload_bytes:,.0f} (over the run) "
                 f"| — | {reload_summary['acc']:.2f} |")
    for name in ("spare-migrate", "spare-semi"):
        done = repartitions(results[name][1])
        lines += ["", f"{name}: " + ("; ".join(
            f"re-partitioned at step {it}: {moved:,.0f} bytes moved once (each counted by its "
            f"sender), {1e3 * seconds:.2f} ms on the slowest rank" for it, moved, seconds in done)
            if done else "never re-partitioned")]
    lines += ["", f"reload: the re-partition through a checkpoint cost {one_off:.2f} s of wall "
              f"time once (writing it, then a new process compiling the shares, loading and "
              f"slicing it), the time of {1e3 * one_off / reload_summary['ms_step']:.0f} "
              f"modelled steps"]
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")
    if a.plot:
        for name in results:
            results[name][2]["slow_rank"] = slow_rank
        plot(results, ["even-migrate", "spare-migrate", "shares-none"], a.settle, a.plot)


if __name__ == "__main__":
    main()

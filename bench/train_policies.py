#!/usr/bin/env python3
"""Issue 9's experiment: a small ViT trained on Fashion-MNIST at tp 4 with
chi = 1, 2, 3 stragglers under every balancing policy, accuracy and time
against the straggler-free baseline and the ideal time.

Runs, all from the same seed (same init, same batches):
  baseline                      no straggler, --policy none
  baseline-tp2                  the same at --control-tp: f32 round-off alone
  per chi (ranks 3, 2, 1 slowed by --factors[0], [1], [2] in turn):
    none                        nobody balances: the stragglers set the pace
    resize-random               stragglers prune units picked at random
    resize-priority             ... the least-varying units (--select variation)
    migrate                     stragglers hand units to fast ranks (exact)
    semi                        mild stragglers resize, bad ones migrate (priority)
    resize-importance           (only if named) ... the least important units by
                                output (--select importance), for contrast
    resize-displacement         (only if named) ... the units whose weights moved
                                least net over 16-31 steps (--select displacement)
  per imputation (at each --impute-chis): resize-random with each of
    --imputes (default same, average; same:N adds --same-max-age N); zero is
    the resize-random run above

Time is htp-run's --clock cpu model by default: 4 ranks share the build
machine's 2 cores, so a wall clock would book the time a rank waits for a
core as its work, and a straggler's --slow wait would hand its core to the
others instead of delaying them. With --clock cpu each rank's hooks are timed
by its thread's CPU time (what the planner sees), --slow books F times that
without waiting, and a step takes as long as its slowest rank's CPU work
plus its slowed share: the time on one device a rank (model_s per epoch).
--clock units times the same way but feeds the planner each hook's units x
FLOPs x F instead of its CPU time, so the plans do not depend on timer noise
and runs that differ only in the selection get the same plans (for paired
comparisons of selections). --clock wall measures the wall clock instead
(for machines with a core a rank).

The ideal time of a chi is the baseline's with its hook work spread over the
ranks by speed: T0 (1 - h) + T0 h tp / sum_r (1 / F_r), where h is the
share of the baseline's step spent in the balance hooks (its trace), the
only work --slow stretches and the planner moves. "hooks / ideal" is the
same for the hooks alone, from the traces: the slowest rank's hook seconds a
step, over the baseline's mean hook seconds a rank times tp / sum_r (1 / F_r).
It leaves out the rest of the step and the noise of a max over ranks in the
baseline.

    bench/train_policies.py --htp-run build/tools/htp-run/htp-run --out bench/out/policies \
        --plot bench/figures/train-policies

Writes DIR/*.json (metrics), DIR/*.jsonl (traces), a markdown table on
stdout and in DIR/table.md, and two PNGs (--plot PREFIX): accuracy against
training time per chi, and final accuracy / time over ideal per policy.
Needs matplotlib for the plots only.
"""
import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = [  # name, htp-run flags
    ("none", ["--policy", "none"]),
    ("resize-random", ["--policy", "resize", "--select", "random"]),
    ("resize-priority", ["--policy", "resize", "--select", "variation"]),
    ("migrate", ["--policy", "migrate"]),
    ("semi", ["--policy", "semi", "--select", "variation"]),
    # Not in the default set: the inference-time selection, for contrast.
    ("resize-importance", ["--policy", "resize", "--select", "importance"]),
    ("resize-displacement", ["--policy", "resize", "--select", "displacement"]),
]
DEFAULT_POLICIES = ["none", "resize-random", "resize-priority", "migrate", "semi"]


# Command-line checks and subprocesses shared by the bench scripts
# (elastic.py, mixed_fleet.py, block.py, policies.py, ...): a bad argument is
# a parser.error (exit 2) before anything is written, a failed command one
# line with the command and its exit status, never a traceback.

GEN_VIT = os.path.join(HERE, "..", "examples", "gen_vit.py")


def prog():
    return os.path.basename(sys.argv[0])


# Plain ASCII decimal, as htp-run reads numbers: Python's int() and float()
# would also take " 3", "1_000", "+3", other scripts' digits, "inf", "nan".
WHOLE = re.compile(r"-?[0-9]+")
DECIMAL = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")


def int_from(low, high=None):
    """An argparse type: a whole number >= low (and <= high)."""
    def parse(text):
        if not WHOLE.fullmatch(text):
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
        value = int(text)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range: must be " +
                (f">= {low}" if high is None else f"from {low} to {high}"))
        return value
    return parse


def number_from(low, high=math.inf, above=False):
    """An argparse type: a finite number >= low (> low if above), <= high."""
    def parse(text):
        if not DECIMAL.fullmatch(text):
            raise argparse.ArgumentTypeError(f"'{text}' is not a number")
        value = float(text)
        if not (math.isfinite(value) and (value > low if above else value >= low)
                and value <= high):
            bound = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high < math.inf
                                                             else "")
            raise argparse.ArgumentTypeError(f"{text} is out of range: a finite number {bound}")
        return value
    return parse


def check_executable(parser, option, path):
    """parser.error unless path is an executable file."""
    if not os.path.exists(path):
        parser.error(f"{option} {path}: no such file")
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        parser.error(f"{option} {path}: not an executable file")


def check_build(parser, build, *tools):
    """parser.error unless the build folder holds each tool (paths in it)."""
    if not os.path.isdir(build):
        parser.error(f"--build {build}: no such folder (build the tree first)")
    for tool in tools:
        path = os.path.join(build, tool)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            parser.error(f"--build {build}: no executable {tool} in it (build it first)")


def check_out_folder(parser, option, path):
    """parser.error unless path is a folder, or one that can be made (its
    nearest existing parent a writable folder). Nothing is created."""
    if not path:
        parser.error(f"{option} '': an empty path")
    if os.path.exists(path):
        if not os.path.isdir(path):
            parser.error(f"{option} {path}: exists and is not a folder")
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        parser.error(f"{option} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        parser.error(f"{option} {path}: cannot create it in {parent} (permission denied)")


def check_out_file(parser, option, path, made_folder=None):
    """parser.error unless path can be written as a file: not a folder, in
    an existing folder, or in made_folder, which the script makes (its
    --out, already checked by check_out_folder)."""
    if not path:
        parser.error(f"{option} '': an empty path")
    if os.path.isdir(path) or (made_folder and os.path.abspath(path) == os.path.abspath(made_folder)):
        parser.error(f"{option} {path}: is a folder")
    folder = os.path.dirname(os.path.abspath(path))
    if made_folder and folder == os.path.abspath(made_folder) and not os.path.exists(folder):
        return
    if not os.path.isdir(folder):
        parser.error(f"{option} {path}: no folder {os.path.dirname(path) or folder}")
    # A file made and removed there: permissions alone pass root anywhere
    # (/proc), and a write found impossible after the runs loses them.
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".write-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as e:
        parser.error(f"{option} {path}: cannot write in {folder}: {e.strerror or e}")


def check_in_file(parser, option, path):
    """parser.error unless path is a readable file."""
    if not os.path.isfile(path):
        parser.error(f"{option} {path}: " + ("is a folder" if os.path.isdir(path)
                                            else "not a regular file (a device or a pipe)"
                                            if os.path.exists(path) else "no such file"))
    if not os.access(path, os.R_OK):
        parser.error(f"{option} {path}: cannot read it (permission denied)")


def check_gen_vit(parser, args):
    """parser.error with gen_vit.py's own message unless it takes args
    (the bench's --depth, --dim, ... go to it under the same names)."""
    done = subprocess.run([sys.executable, GEN_VIT, *args, "-o", os.devnull],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        parser.error("the model: " + lines[-1].replace("gen_vit.py: error: ", ""))


def run_command(command, what=None, **kwargs):
    """subprocess.run(command, **kwargs). A command that cannot start or
    fails ends this script (exit 1): the stderr it captured, if any, then one
    line with the command and its exit status."""
    try:
        done = subprocess.run(command, **kwargs)
    except OSError as e:
        raise SystemExit(f"{prog()}: error: cannot run {shlex.join(command)}: {e.strerror or e}")
    if done.returncode != 0:
        err = done.stderr
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        if err and err.strip():
            sys.stderr.write(err if err.endswith("\n") else err + "\n")
        status = (f"exit status {done.returncode}" if done.returncode > 0
                  else f"signal {-done.returncode}")
        raise SystemExit(f"{prog()}: error: {what + ': ' if what else ''}"
                         f"{shlex.join(command)} failed with {status}")
    return done


def htp_run_report(done):
    """htp-run's --report json from a finished run (run_command's result
    with stdout captured), as a dict; ends this script (exit 1) with one line
    when stdout holds none (an --htp-run that is not htp-run)."""
    try:
        report = json.loads(done.stdout)
    except (TypeError, ValueError):
        report = None
    if not isinstance(report, dict):
        shown = (done.stdout or "").strip()[:60]
        raise SystemExit(f"{prog()}: error: {shlex.join(done.args[:1])} printed no htp-run JSON "
                         f"report ({shown!r}): is it htp-run?")
    return report


def slows(chi, factors, tp, onset_step=0):
    """--slow flags for chi stragglers: ranks tp-1, tp-2, ... with factors in
    order, slow from training step onset_step on."""
    flags = []
    for i in range(chi):
        at = f"@{onset_step}" if onset_step else ""
        flags += ["--slow", f"{tp - 1 - i}:{factors[i]!r}{at}"]
    return flags


def write_model(path, depth, dim, heads, mlp, patch=7, batch=64):
    """The Fashion-MNIST ViT these benchmarks train (gen_vit.py --model:
    28x28 grey images, 10 classes) written to path."""
    run_command([sys.executable, GEN_VIT] + model_args(depth, dim, heads, mlp, patch, batch) +
                ["-o", path])


def model_args(depth, dim, heads, mlp, patch=7, batch=64):
    """gen_vit.py's arguments for write_model's ViT."""
    return ["--model", "--depth", str(depth), "--dim", str(dim), "--heads", str(heads), "--mlp",
            str(mlp), "--patch", str(patch), "--image", "28", "--channels", "1", "--classes",
            "10", "--batch", str(batch)]


def reusable(metrics, stamp, command, epochs):
    """The metrics of an earlier run of exactly `command` that finished its
    `epochs` (--reuse), else None: a run with other settings, or one killed
    half way, is run again."""
    try:
        with open(stamp) as f:
            if f.read() != json.dumps(command):
                return None
        with open(metrics) as f:
            recorded = json.load(f)
        return recorded if len(recorded.get("epochs") or []) == epochs else None
    except (OSError, ValueError, AttributeError):
        return None


def run(a, name, flags, model, tp=None):
    metrics = os.path.join(a.out, f"{name}.json")
    trace = os.path.join(a.out, f"{name}.jsonl")
    stamp = os.path.join(a.out, f"{name}.cmd.json")  # the command that wrote metrics
    command = [a.htp_run, model, "--train", "--tp", str(tp or a.tp), "--epochs", str(a.epochs),
               "--optimizer", a.optimizer, "--lr", str(a.lr), "--seed", str(a.seed), "--metrics", metrics, "--trace", trace]
    if a.limit_train:
        command += ["--limit-train", str(a.limit_train)]
    if a.limit_test:
        command += ["--limit-test", str(a.limit_test)]
    if a.data:
        command += ["--data", a.data]
    command += ["--ewma-alpha", str(a.ewma_alpha), "--hysteresis", str(a.hysteresis),
                "--clock", a.clock] + flags
    if a.reuse:
        recorded = reusable(metrics, stamp, command, a.epochs)
        if recorded is not None:
            return recorded, trace
        if os.path.exists(metrics):
            print(f"{name}: {metrics} is not this run's (other settings, or not finished): "
                  "running it again", file=sys.stderr)
    if os.path.exists(stamp):
        os.unlink(stamp)
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    run_command(command, name, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with open(metrics) as f:
            recorded = json.load(f)
    except (OSError, ValueError) as error:
        raise SystemExit(f"{name}: {a.htp_run} wrote no readable metrics ({metrics}: {error}); "
                         "is it htp-run?")
    with open(stamp, "w") as f:
        f.write(json.dumps(command))
    return recorded, trace


def hook_seconds(trace_path, tp, reduce, kinds=(0, 1), from_step=0):
    """Mean over steps of reduce(the ranks' hook seconds, of the sites in
    kinds: 0 attention, 1 MLP): mean for the work a rank does (the
    baseline's share of the step), max for what the step waits for. The
    trace's 'seconds' is what the step fed the planner (the hooks' time); the
    step's own time is that plus the rest, which the metrics give."""
    per_step = {}
    with open(trace_path) as f:
        for line in f:
            row = json.loads(line)
            if row["iter"] < from_step:
                continue
            # On the units clock site_seconds are the planner's model;
            # measured_seconds are the hooks' CPU time, as on the cpu clock.
            sites = row.get("measured_seconds") or row.get("site_seconds") or [0, 0]
            per_step.setdefault(row["iter"], []).append(sum(sites[k] or 0 for k in kinds))
    steps = [reduce(v) for v in per_step.values() if len(v) == tp]
    return sum(steps) / len(steps) if steps else 0.0


def whole_unit_floor(units, speeds):
    """The smallest makespan of units identical units dealt whole among
    ranks of these speeds (any counts: the best an exact policy can do,
    fixed costs aside), over the continuous units / sum(speeds). It is
    some L / s: the first candidate at which the ranks' floor(t s) cover
    the units."""
    candidates = sorted(L / s for s in speeds for L in range(1, units + 1))
    for t in candidates:
        if sum(int(t * s + 1e-9) for s in speeds) >= units:
            return t / (units / sum(speeds))
    return float("inf")


def mean(values):
    return sum(values) / len(values)


def moved(trace_path, from_step=0):
    """Mean per training step from from_step on, summed over ranks: [heads,
    MLP units] pruned and [heads, MLP units] sent, from the trace (per layer:
    every layer runs the same plan)."""
    pruned, sent, steps = [0, 0], [0, 0], set()
    with open(trace_path) as f:
        for line in f:
            row = json.loads(line)
            if row["iter"] < from_step:
                continue
            steps.add(row["iter"])
            for k in range(2):
                pruned[k] += (row.get("pruned") or [0, 0])[k]
                sent[k] += (row.get("sent") or [0, 0])[k]
    n = max(1, len(steps))
    return [p / n for p in pruned], [x / n for x in sent]


def summary(metrics):
    """Final and best test accuracy, the training time (the modelled time
    under --clock cpu, else the wall clock's), its mean per step, the
    curve as (epoch seconds, accuracy)."""
    epochs = metrics["epochs"]
    key = "model_s" if metrics.get("clock") in ("cpu", "units") else "epoch_s"
    seconds = [e[key] for e in epochs]
    return {"acc": 100 * epochs[-1]["test_acc"], "best": 100 * max(e["test_acc"] for e in epochs),
            "seconds": sum(seconds),
            "ms_step": 1e3 * sum(seconds) / (len(epochs) * metrics["steps_per_epoch"]),
            "wall": sum(e["epoch_s"] for e in epochs),
            "curve": [(s, 100 * e["test_acc"]) for s, e in zip(seconds, epochs)]}


def plot(a, base, rows, ideal, control):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    chis = sorted({r["chi"] for r in rows if r["chi"]})
    fig, axes = plt.subplots(1, len(chis), figsize=(5.2 * len(chis), 4.2), sharey=True)
    axes = axes if len(chis) > 1 else [axes]
    for axis, chi in zip(axes, chis):
        curves = [("baseline (no straggler)", base)] + (
            [(f"baseline at tp {a.control_tp} (round-off)", control)] if control else []) + [
            (r["name"], r) for r in rows if r["chi"] == chi and r["impute"] == "zero"]
        for label, r in curves:
            t, accs = 0.0, []
            xs = []
            for seconds, acc in r["curve"]:
                t += seconds
                xs.append(t)
                accs.append(acc)
            axis.plot(xs, accs, marker="o", markersize=3, label=label,
                      linestyle="--" if label.startswith("baseline (") else
                      ":" if label.startswith("baseline") else "-")
        axis.axvline(ideal[chi], color="grey", linestyle=":", label="ideal end")
        axis.set_title(f"chi = {chi} straggler{'s' if chi > 1 else ''} "
                       f"({', '.join(f'{f:g}x' for f in a.factors[:chi])})")
        axis.set_xlabel("training time (s" + (", one device a rank" if a.clock != "wall" else "") + ")")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[-1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Fashion-MNIST, tp {a.tp}: test accuracy against training time")
    fig.tight_layout()
    fig.savefig(f"{a.plot}-curves.png", dpi=110)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    def label(r):  # an imputation run is a bar of its own
        return r["name"] + ("" if r["impute"] == "zero" else f" ({r['impute']})")
    names = list(dict.fromkeys(label(r) for r in rows))
    width = 0.8 / len(chis)
    nan = float("nan")
    for i, chi in enumerate(chis):
        by = {label(r): r for r in rows if r["chi"] == chi}
        xs = [j + (i - (len(chis) - 1) / 2) * width for j in range(len(names))]
        left.bar(xs, [by[n]["acc"] - base["acc"] if n in by else nan for n in names], width,
                 label=f"chi {chi}")
        right.bar(xs, [by[n]["seconds"] / ideal[chi] if n in by else nan for n in names], width,
                  label=f"chi {chi}")
    for axis in (left, right):
        axis.set_xticks(range(len(names)))
        axis.set_xticklabels(names, rotation=20, fontsize=8)
        axis.grid(axis="y", alpha=0.3)
        axis.legend(fontsize=8)
    left.axhline(0, color="black", linewidth=0.8)
    left.set_ylabel("final test accuracy - baseline (points)")
    right.axhline(1, color="black", linewidth=0.8)
    right.set_ylabel("training time / ideal")
    fig.suptitle(f"Policies at tp {a.tp}: accuracy cost and time against the ideal")
    fig.tight_layout()
    fig.savefig(f"{a.plot}-bars.png", dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--htp-run", required=True)
    p.add_argument("--out", required=True, help="folder for metrics, traces and the table")
    p.add_argument("--model", help="a gen_vit.py --model file (default: written from the flags)")
    p.add_argument("--depth", type=int_from(1), default=2)
    p.add_argument("--dim", type=int_from(1), default=64)
    p.add_argument("--heads", type=int_from(1), default=8)
    p.add_argument("--mlp", type=int_from(1), default=128)
    p.add_argument("--patch", type=int_from(1), default=7)
    p.add_argument("--batch", type=int_from(1), default=64)
    p.add_argument("--tp", type=int_from(2, 1024), default=4)
    p.add_argument("--epochs", type=int_from(1), default=8)
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                   help="htp-run's --optimizer (default adamw; sgd: with momentum 0.9)")
    p.add_argument("--lr", type=number_from(0, 10, above=True), default=2e-3,
                   help="peak learning rate (default 2e-3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit-train", type=int_from(0), default=0)
    p.add_argument("--limit-test", type=int_from(0), default=0)
    p.add_argument("--data")
    p.add_argument("--factors", default="1.25,3,2",
                   help="slowdowns of ranks tp-1, tp-2, tp-3 (default 1.25,3,2: chi 1 is a "
                        "mild straggler, which semi resizes; chi 2 adds a bad one)")
    p.add_argument("--chis", default="1,2,3")
    p.add_argument("--onset", type=number_from(0), default=0.0,
                   help="the epoch (a fraction is fine) the stragglers turn slow at (default 0: "
                        "from the first step). Later onsets let the variation priority rank "
                        "units that have learned something; the ideal and the per-step "
                        "columns count only the steps from the onset on")
    p.add_argument("--ewma-alpha", type=number_from(0, 1, above=True), default=0.05,
                   help="htp-run's detector smoothing (default 0.05: steps of a few ms on "
                        "an oversubscribed CPU are noisy; htp-run's own default is 0.3)")
    p.add_argument("--hysteresis", type=int_from(1), default=20,
                   help="htp-run's detector hysteresis in steps (default 20; htp-run's 3)")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                   help="the policies to run per chi (default %(default)s; also "
                        "resize-importance: --select importance; resize-displacement: --select "
                        "displacement)")
    p.add_argument("--impute-chis", "--impute-chi", default="2",
                   help="the chis of the imputation runs (default 2; 0: none)")
    p.add_argument("--imputes", default="same,average",
                   help="the imputation runs' --impute values (default %(default)s); same:N "
                        "runs --impute same --same-max-age N (htp-run's default in training "
                        "is 1; 0 is any age)")
    p.add_argument("--control-tp", type=int_from(0), default=2,
                   help="tp of the round-off control run (default 2; 0: no control run)")
    p.add_argument("--clock", choices=["cpu", "units", "wall"], default="cpu",
                   help="htp-run --clock: cpu (default) models one device a rank from each "
                        "rank's CPU time; units does too but plans from units x FLOPs x "
                        "--slow (the same plans whatever --select: paired comparisons); "
                        "wall times the wall clock (a core a rank needed)")
    p.add_argument("--units-per-rank",
                   help="H,M: heads and MLP units a rank, for the whole-unit floor (default: "
                        "the baseline's metrics, units_per_rank; htp-run before 2026-11-26 "
                        "did not write it)")
    p.add_argument("--plot", help="PNG prefix: PREFIX-curves.png, PREFIX-bars.png")
    p.add_argument("--reuse", action="store_true",
                   help="keep runs whose metrics exist and were written by the same command, "
                        "finished (others run again)")
    a = p.parse_args()
    try:
        a.factors = [float(f) for f in a.factors.split(",")]
    except ValueError:
        p.error(f"--factors {a.factors}: not a comma-separated list of numbers")
    if any(not math.isfinite(f) or f < 1 for f in a.factors):
        p.error(f"--factors {a.factors}: every slowdown must be a finite number >= 1")
    try:
        chis = [int(c) for c in a.chis.split(",")]
        impute_chis = {int(c) for c in a.impute_chis.split(",")} - {0}
    except ValueError:
        p.error(f"--chis {a.chis} / --impute-chis {a.impute_chis}: comma-separated whole numbers")
    if min(chis) < 1 or min(impute_chis, default=1) < 1:
        p.error("--chis and --impute-chis: each chi must be >= 1 (--impute-chis 0: none)")
    imputes = []  # (label, htp-run flags)
    for item in a.imputes.split(","):
        kind, _, age = item.partition(":")
        if kind not in ("same", "average") or (age and (kind != "same" or not age.isdigit())):
            p.error(f"--imputes: '{item}' is not same, same:N or average")
        imputes.append((item.replace(":", "-age"),
                        ["--impute", kind] + (["--same-max-age", age] if age else [])))
    policies = [(name, flags) for name, flags in POLICIES if name in a.policies.split(",")]
    unknown = set(a.policies.split(",")) - {name for name, _ in POLICIES}
    if unknown:
        p.error(f"--policies: unknown {', '.join(sorted(unknown))}")
    if max(chis) > min(len(a.factors), a.tp - 1):
        p.error("each chi needs that many --factors and a fast rank left")
    if not 0 <= a.onset < a.epochs:
        p.error("--onset: an epoch in [0, --epochs)")
    if a.units_per_rank:
        parts = a.units_per_rank.split(",")
        if len(parts) != 2 or not all(x.isdigit() and int(x) >= 1 for x in parts):
            p.error(f"--units-per-rank {a.units_per_rank}: H,M, two whole numbers >= 1")
    check_executable(p, "--htp-run", a.htp_run)
    check_out_folder(p, "--out", a.out)
    if a.model:
        check_in_file(p, "--model", a.model)
    else:
        check_gen_vit(p, model_args(a.depth, a.dim, a.heads, a.mlp, a.patch, a.batch))
    if a.data and not os.path.isdir(a.data):
        p.error(f"--data {a.data}: no such folder")
    if a.plot:
        check_out_file(p, "--plot", a.plot + "-curves.png", made_folder=a.out)
    os.makedirs(a.out, exist_ok=True)
    model = a.model or os.path.join(a.out, "vit.mlir")
    if not a.model:
        write_model(model, a.depth, a.dim, a.heads, a.mlp, a.patch, a.batch)

    metrics, trace = run(a, "baseline", ["--policy", "none"], model)
    base = summary(metrics)
    units = ([int(x) for x in a.units_per_rank.split(",")] if a.units_per_rank
             else metrics.get("units_per_rank"))
    # The round-off control: the same model at another tp sums in another
    # order and nothing else; how far its accuracy ends from the baseline's
    # is what f32 round-off alone does over a whole run (exact policies
    # such as migrate can only be held to that).
    control = (summary(run(a, f"baseline-tp{a.control_tp}", ["--policy", "none"], model,
                           tp=a.control_tp)[0]) if a.control_tp else None)
    share = hook_seconds(trace, a.tp, mean)
    if not share > 0:
        units = None  # no hook seconds in the trace: no shares to weigh the floor by
    heads_share = hook_seconds(trace, a.tp, mean, kinds=(0,)) / share if units else 0.0
    step_s = base["ms_step"] / 1e3
    h = min(1.0, share / step_s) if step_s > 0 else 0.0
    onset_step = round(a.onset * metrics["steps_per_epoch"])
    slow_share = 1 - onset_step / (a.epochs * metrics["steps_per_epoch"])
    rows, ideal, floor, step_floor = [], {}, {}, {}
    for chi in chis:
        speeds = [1.0] * a.tp
        for i in range(chi):
            speeds[a.tp - 1 - i] = 1.0 / a.factors[i]
        # Before the onset every rank is fast: the ideal is the baseline's.
        ideal[chi] = base["seconds"] * ((1 - slow_share) +
                                        slow_share * ((1 - h) + h * a.tp / sum(speeds)))
        # Whole heads and MLP units cannot match the ideal's divisible work:
        # the hooks' floor for exact policies, each kind weighted by its
        # share of the baseline's hook time.
        if units:
            floor[chi] = (heads_share * whole_unit_floor(a.tp * units[0], speeds) +
                          (1 - heads_share) * whole_unit_floor(a.tp * units[1], speeds))
            spread = h * a.tp / sum(speeds)
            step_floor[chi] = (((1 - slow_share) + slow_share * ((1 - h) + spread * floor[chi])) /
                               ((1 - slow_share) + slow_share * ((1 - h) + spread)))
        runs = [(name, flags, "zero") for name, flags in policies]
        if chi in impute_chis:
            runs += [("resize-random", ["--policy", "resize"] + flags, label)
                     for label, flags in imputes]
        for name, flags, impute in runs:
            tag = f"chi{chi}-{name}" + ("" if impute == "zero" else f"-{impute}")
            metrics, trace = run(a, tag, flags + slows(chi, a.factors, a.tp, onset_step), model)
            pruned, sent = moved(trace, onset_step)
            # The hooks alone: the slowest rank's hook time a step over the
            # baseline's hook work spread by speed (no noise of the rest of
            # the step, no max over noisy ranks in the ideal).
            hooks = (hook_seconds(trace, a.tp, max, from_step=onset_step) /
                     (share * a.tp / sum(speeds)))
            rows.append(dict(summary(metrics), name=name, chi=chi, impute=impute, hooks=hooks,
                             pruned=pruned, sent=sent))

    lines = [f"Model: depth {a.depth}, dim {a.dim}, {a.heads} heads, MLP {a.mlp}, patch "
             f"{a.patch}, batch {a.batch}; tp {a.tp}; {a.epochs} epochs"
             f"; detector: EWMA alpha {a.ewma_alpha:g}, hysteresis {a.hysteresis}"
             f"{f' of {a.limit_train} images' if a.limit_train else ''}, {'AdamW' if a.optimizer == 'adamw' else 'SGD'} lr {a.lr:g} "
             f"cosine, seed {a.seed}; {a.clock} clock"
             f"{' (one device a rank, modelled)' if a.clock != 'wall' else ''}"
             f"{f'; stragglers from epoch {a.onset:g} (step {onset_step})' if onset_step else ''}"
             f". Baseline (no "
             f"straggler): {base['acc']:.2f} % in {base['seconds']:.0f} s "
             f"({base['ms_step']:.2f} ms/step; hooks {100 * h:.0f} % of the step).", "",
             "| chi | slowdowns | policy | impute | test acc % | - baseline | train s | / ideal "
             "| hooks / ideal "
             "| pruned / step (heads, MLP units) | sent / step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        # none and migrate compute every unit: no imputation applies.
        impute = r["impute"] if r["name"].startswith(("resize", "semi")) else "-"
        lines.append(f"| {r['chi']} | {', '.join(f'{f:g}' for f in a.factors[:r['chi']])} | "
                     f"{r['name']} | {impute} | {r['acc']:.2f} | "
                     f"{r['acc'] - base['acc']:+.2f} | {r['seconds']:.0f} | "
                     f"{r['seconds'] / ideal[r['chi']]:.2f} | {r['hooks']:.2f} | "
                     f"{r['pruned'][0]:.2f}, {r['pruned'][1]:.1f} | "
                     f"{r['sent'][0]:.2f}, {r['sent'][1]:.1f} |")
    lines.append("")
    if control:
        lines.append(f"Round-off control: the baseline at tp {a.control_tp} (the same model, "
                     f"its sums in another order) ends at {control['acc']:.2f} % "
                     f"({control['acc'] - base['acc']:+.2f} points).")
    lines.append("")
    lines.append("Ideal time per chi: " + ", ".join(f"chi {c}: {ideal[c]:.0f} s" for c in chis))
    if units:
        lines.append("")
        lines.append("Whole-unit floor of hooks / ideal for exact policies (the best whole "
                     f"{a.tp * units[0]} heads and {a.tp * units[1]} MLP units can do, "
                     f"attention {100 * heads_share:.0f} % of the hooks): " +
                     ", ".join(f"chi {c}: {floor[c]:.2f}" for c in chis) +
                     "; of train s / ideal: " +
                     ", ".join(f"chi {c}: {step_floor[c]:.2f}" for c in chis))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text + "\n")
    if a.plot:
        plot(a, base, rows, ideal, control)


if __name__ == "__main__":
    main()

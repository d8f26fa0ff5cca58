#!/usr/bin/env python3
"""Draws htp-run --train --metrics files as one PNG: test accuracy against
cumulative training time (left) and against epochs (right), one line per
run, labelled by the run's tp, policy and --slow (or --label). Training time
is the sum of the epochs' epoch_s (training steps and evaluation), so runs
of different speeds line up where a person compares them: how accurate a
model is after so many seconds. A resumed run's metrics start at its first
resumed epoch.

    htp-run vit.mlir --train --metrics none.json ...
    htp-run vit.mlir --train --tp 4 --slow 2:2 --metrics slow.json ...
    bench/train_plot.py none.json slow.json -o accuracy.png

Needs matplotlib. A file that is not a metrics JSON is an error naming it
(exit 1).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_policies  # noqa: E402  (the argument checks)


def label_of(metrics):
    slow = metrics.get("slow")
    parts = [f"tp {metrics.get('tp', '?')}", metrics.get("policy", "?")]
    if metrics.get("matmul_precision", "f32") != "f32":
        parts.append(f"{metrics['matmul_precision']} matmuls")
    if slow:
        parts.append(f"slow {slow}" if isinstance(slow, str) else f"slow {json.dumps(slow)}")
    return ", ".join(parts)


def read(path):
    try:
        with open(path) as f:
            metrics = json.load(f)
        epochs = metrics["epochs"]
        rows = [(int(e["epoch"]), float(e["epoch_s"]), float(e["test_acc"]),
                 float(e["train_loss"])) for e in epochs]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"train_plot: {path}: not an htp-run --metrics file ({e})")
    if not rows:
        raise SystemExit(f"train_plot: {path}: no epochs")
    for epoch, seconds, accuracy, loss in rows:  # what htp-run writes, nothing else
        if not (seconds >= 0 and math.isfinite(seconds) and 0 <= accuracy <= 1):
            raise SystemExit(f"train_plot: {path}: epoch {epoch}: epoch_s {seconds} or "
                             f"test_acc {accuracy} is out of range (seconds >= 0, a fraction)")
    return metrics, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", nargs="+", help="htp-run --metrics JSON files")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--label", action="append", default=[],
                        help="a label per file, in order (default: tp, policy, slow)")
    parser.add_argument("--title", default="htp-run --train: test accuracy")
    a = parser.parse_args()
    if a.label and len(a.label) != len(a.metrics):
        parser.error(f"--label given {len(a.label)} times for {len(a.metrics)} files")
    for path in a.metrics:
        train_policies.check_in_file(parser, "metrics file", path)
    train_policies.check_out_file(parser, "-o", a.output)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"train_plot: needs matplotlib ({e})")
    fig, (by_time, by_epoch) = plt.subplots(1, 2, figsize=(12, 4.5))
    for index, path in enumerate(a.metrics):
        metrics, rows = read(path)
        label = a.label[index] if a.label else label_of(metrics)
        seconds, elapsed = [], 0.0
        for _, epoch_s, _, _ in rows:
            elapsed += epoch_s
            seconds.append(elapsed)
        accuracy = [100 * r[2] for r in rows]
        by_time.plot(seconds, accuracy, marker="o", markersize=3, label=label)
        by_epoch.plot([r[0] for r in rows], accuracy, marker="o", markersize=3, label=label)
    by_time.set_xlabel("training time, s (sum of epoch_s)")
    by_epoch.set_xlabel("epoch")
    for axis in (by_time, by_epoch):
        axis.set_ylabel("test accuracy, %")
        axis.grid(alpha=0.3)
    by_epoch.legend(fontsize=8, loc="lower right")
    try:
        fig.suptitle(a.title)
        fig.tight_layout()
        # format= writes the name as given (matplotlib appends .png to a
        # name without an extension, and the line below would name another file).
        fig.savefig(a.output, dpi=110, format="png")
    except (OSError, ValueError) as e:  # a folder not there, a title's TeX: one line
        raise SystemExit(f"train_plot: cannot draw or write {a.output}: "
                         f"{' '.join(str(e).split())[:300]}")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

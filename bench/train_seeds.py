#!/usr/bin/env python3
"""Seeds of one train_policies.py cell side by side: the final test accuracy
of each policy run in DIR/s*/ (one train_policies.py --out a seed), each
policy's paired gap to a reference policy per seed (same seed: same init,
batches and round-off control), the gaps' mean and standard error, and the
seeds' round-off controls (the baseline at another tp) for scale. Runs
still in progress (fewer epochs than their baseline) are left out.

    bench/train_seeds.py bench/out/onset --cell chi3 --against resize-random \\
        --policies resize-priority,resize-importance --plot bench/figures/train-seeds.png

A gap is called shown only if its mean is more than twice its standard
error over 3 seeds or more (a rough two-sided 95 % for a handful of seeds:
the count is printed).
"""
import argparse
import glob
import json
import math
import os
import re


def epochs_of(path):
    """The epochs list of an htp-run --metrics file; ends this script with
    one line (exit 1) when the file is not one (empty, truncated, other)."""
    try:
        with open(path) as f:
            done = json.load(f)["epochs"]
        if not isinstance(done, list) or not all(isinstance(e, dict) for e in done):
            raise ValueError("'epochs' is not a list of epochs")
        return done
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"train_seeds: {path}: not an htp-run --metrics file ({e})")


def final_acc(path, epochs):
    """The last epoch's test accuracy, or None while the run has fewer than
    epochs epochs (metrics are written after each) or does not exist."""
    if not os.path.exists(path) or epochs < 1:
        return None
    done = epochs_of(path)
    try:
        return 100 * float(done[-1]["test_acc"]) if len(done) == epochs else None
    except (KeyError, TypeError, ValueError) as e:
        raise SystemExit(f"train_seeds: {path}: its last epoch has no test_acc ({e})")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="a folder of s<seed>/ train_policies.py outputs")
    p.add_argument("--cell", default="chi2", help="the runs' prefix (default chi2)")
    p.add_argument("--against", default="resize-random",
                   help="the reference policy of the gaps (default %(default)s)")
    p.add_argument("--policies", default="resize-priority",
                   help="policies compared with --against, comma-separated (default "
                        "%(default)s); a seed counts for a policy once both runs are done")
    p.add_argument("--plot", help="PNG of the per-seed accuracies and gaps")
    a = p.parse_args()
    if not os.path.isdir(a.dir):
        p.error(f"{a.dir}: no such folder")
    names = a.policies.split(",")
    if not all(names) or a.against in names:
        p.error(f"--policies {a.policies!r}: names, comma-separated, other than --against")
    if a.plot is not None:
        folder = os.path.dirname(os.path.abspath(a.plot))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            p.error(f"--plot {a.plot}: no writable folder {folder}")
        if os.path.splitext(a.plot)[1].lower() not in ("", ".png"):
            p.error(f"--plot {a.plot}: the plot is a PNG: name it .png")
    rows = []
    for d in glob.glob(os.path.join(a.dir, "s*")):
        m = re.fullmatch(r"s(\d+)", os.path.basename(d))
        base = os.path.join(d, "baseline.json")
        if not m or not os.path.exists(base):
            continue
        epochs = len(epochs_of(base))
        row = {k: final_acc(os.path.join(d, f"{a.cell}-{k}.json"), epochs)
               for k in names + [a.against]}
        row["baseline"] = final_acc(base, epochs)
        if row[a.against] is None or all(row[k] is None for k in names):
            continue
        controls = glob.glob(os.path.join(d, "baseline-tp*.json"))
        control = final_acc(controls[0], epochs) if controls else None
        row["seed"] = int(m.group(1))
        row["control"] = control - row["baseline"] if control is not None else float("nan")
        rows.append(row)
    if not rows:
        raise SystemExit(f"train_seeds: no s<seed>/ in {a.dir} with finished {a.cell}-"
                         f"{a.against} and baseline runs")
    rows.sort(key=lambda r: r["seed"])

    def cell(v):
        return "-" if v is None else f"{v:+.2f}"

    print(f"| seed | baseline % | {a.against} | " + " | ".join(names) + " | " +
          " | ".join(f"{k} - {a.against}" for k in names) + " | round-off control |")
    print("|---" * (3 + 2 * len(names) + 1) + "|")
    for r in rows:
        print(f"| {r['seed']} | {r['baseline']:.2f} | {cell(r[a.against] - r['baseline'])} | " +
              " | ".join(cell(None if r[k] is None else r[k] - r['baseline']) for k in names) +
              " | " +
              " | ".join(cell(None if r[k] is None else r[k] - r[a.against]) for k in names) +
              f" | {cell(None if math.isnan(r['control']) else r['control'])} |")
    print()
    stats = {}
    for k in names:
        gaps = [r[k] - r[a.against] for r in rows if r[k] is not None]
        n = len(gaps)
        if n == 0:
            print(f"{k} - {a.against}: no seed has a finished {a.cell}-{k} run.")
            continue
        mean = sum(gaps) / n
        se = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (n - 1) / n) if n > 1 else math.inf
        stats[k] = (mean, se)
        print(f"{k} - {a.against} over {n} seeds: mean {mean:+.2f} points, standard error "
              f"{se:.2f}; {sum(g > 0 for g in gaps)} of {n} above. " +
              ("Too few seeds to tell (3 at least)." if n < 3 else
               "Shown (mean > 2 standard errors)." if abs(mean) > 2 * se else
               "Not shown (mean within 2 standard errors)."))
    controls = [abs(r["control"]) for r in rows if not math.isnan(r["control"])]
    if controls:
        print(f"Round-off controls: mean |gap| {sum(controls) / len(controls):.2f} points.")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        seeds = [r["seed"] for r in rows]
        markers = ["o", "^", "v", "D", "x"]
        for i, k in enumerate(names + [a.against, "baseline"]):
            left.plot(seeds, [r[k] if r[k] is not None else math.nan for r in rows],
                      "_" if k == "baseline" else markers[i % len(markers)], label=k,
                      markersize=12 if k == "baseline" else 8)
        left.set_xticks(seeds)
        left.set_xlabel("seed")
        left.set_ylabel("final test accuracy %")
        left.set_title(f"{a.cell}: final accuracy per seed")
        left.legend(fontsize=8)
        width = 0.8 / len(names)
        for i, k in enumerate(names):
            xs = [s + (i - (len(names) - 1) / 2) * width for s in seeds]
            gaps = [r[k] - r[a.against] if r[k] is not None else math.nan for r in rows]
            mean, se = stats.get(k, (math.nan, math.nan))  # nan: no finished seed
            right.bar(xs, gaps, width, label=f"{k}: mean {mean:+.2f} (se {se:.2f})")
        right.axhline(0, color="gray", linewidth=0.8)
        right.set_xticks(seeds)
        right.set_xlabel("seed")
        right.set_ylabel(f"gap to {a.against}, points")
        right.set_title("paired gap (same seed)")
        right.legend(fontsize=8)
        try:
            fig.tight_layout()
            fig.savefig(a.plot, dpi=110, format="png")  # the name as given
        except (OSError, ValueError) as e:  # a folder not there, a format: one line
            raise SystemExit(f"train_seeds: cannot draw or write {a.plot}: "
                             f"{' '.join(str(e).split())[:300]}")
        print(f"wrote {a.plot}")


if __name__ == "__main__":
    main()

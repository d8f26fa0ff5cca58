#!/usr/bin/env python3
"""htp-run --train with balancing in backward (issue 9, item 3), on a whole
ViT from examples/gen_vit.py --model split over 2 ranks and a slice of the
real Fashion-MNIST, rank 1 slowed:
  - migrate is exact: with rank 1 three times slower, --policy migrate
    trains the same model as --policy none (every epoch's numbers equal to
    the printed digits, up to round-off of the regrouped sums), while its
    trace shows units handed off and their bytes moved;
  - resize prunes: with rank 1 1.6 times slower, --policy resize sheds
    units (trace: pruned > 0), the model still learns, and it trains a
    different model from --policy none (the pruned units got no gradient);
  - priority selection (--select variation) and the average and same
    imputations of the backward run, prune and learn (not repeatable run
    to run: the plans follow measured times);
  - semi at tp 3 migrates from a bad straggler and learns;
  - --clock cpu (hooks on each rank thread's CPU time, the step modelled):
    migrate still detects the straggler, hands units off and trains the
    same model, and the metrics carry the clock and each epoch's model_s;
  - --clock units (plans from units x FLOPs x --slow): random and variation
    selections get the same plans step for step, and book exactly the
    modelled seconds.
usage: check_train_balance.py HTP_RUN WORKDIR [DATA_DIR]"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

htp_run, work = sys.argv[1:3]
data = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
os.makedirs(work, exist_ok=True)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


# 6 heads of 4 channels (3 per rank at tp 2, 2 at tp 3), MLP 48 (units of 3).
mlir = os.path.join(work, "vit.mlir")
subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), "--model",
                "--depth", "2", "--dim", "24", "--heads", "6", "--mlp", "48", "--patch", "7",
                "--image", "28", "--channels", "1", "--classes", "10", "--batch", "32", "-o",
                mlir], check=True)
common = ["--epochs", "2", "--limit-train", "1280", "--limit-test", "320", "--seed", "5",
          "--lr", "3e-3"]


last_stderr = ""


def run(name, *flags):
    global last_stderr
    trace = os.path.join(work, name + ".jsonl")
    result = subprocess.run([htp_run, mlir, "--train", "--data", data, "--trace", trace,
                             *common, *flags], capture_output=True, text=True)
    last_stderr = result.stderr
    rows = []
    if os.path.exists(trace):
        with open(trace) as f:
            rows = [json.loads(line) for line in f]
    found = [tuple(float(v) for v in m) for m in re.findall(
        r"^epoch \d+/\d+: loss ([\d.]+), train acc ([\d.]+)%, test loss ([\d.]+), "
        r"test acc ([\d.]+)%", result.stdout, re.M)]
    check(result.returncode == 0 and len(found) == 2,
          f"{name} ({result.returncode}): {result.stderr[-2000:]} {result.stdout}")
    return found, rows


def same(a, b):
    return len(a) == len(b) == 2 and all(
        abs(x[0] - y[0]) <= 2e-3 * y[0] and abs(x[2] - y[2]) <= 2e-3 * y[2] and
        abs(x[1] - y[1]) <= 0.5 and abs(x[3] - y[3]) <= 0.5 for x, y in zip(a, b))


# Chance on 10 classes is 10 %; over the 320 test images its standard
# deviation is 1.7 points, so above 18.5 % is 5 of them clear of chance. (A
# fixed 25 % failed once on a run that reached exactly 25.0 %: under wall-clock
# plans on a loaded machine, resize with variation prunes more or less.)
CHANCE_CLEAR = 10 + 5 * 100 * (0.1 * 0.9 / 320) ** 0.5


def learns(e, name):
    check(len(e) == 2 and e[1][0] < e[0][0] and e[1][3] > CHANCE_CLEAR,
          f"{name} does not learn: {e}")


def total(rows, key):
    return sum(sum(r.get(key) or [0, 0]) for r in rows)


def check_unit_lists(rows, name, units):
    """The trace's pruned_units / sent_units (on each plan's first applied
    line, per pair, local ids) agree with its per-kind counts; returns how
    many lines listed them."""
    listed = 0
    for r in rows:
        if "pruned_units" not in r:
            continue
        listed += 1
        for key, counts in (("pruned_units", r["pruned"]), ("sent_units", r["sent"])):
            for pair, ids in enumerate(r[key]):
                kind = pair % 2
                check(len(ids) == counts[kind] and len(set(ids)) == len(ids) and
                      all(0 <= i < units[kind] for i in ids),
                      f"{name}: iter {r['iter']} rank {r['rank']} {key} pair {pair}: {ids} "
                      f"against {counts[kind]} of {units[kind]}")
    return listed


none, _ = run("none", "--tp", "2", "--slow", "1:3", "--policy", "none")
learns(none, "policy none")
migrate, rows = run("migrate", "--tp", "2", "--slow", "1:3", "--policy", "migrate")
check(same(migrate, none), f"migrate {migrate} differs from none {none}")
check(total(rows, "sent") > 0 and sum(r.get("moved_bytes") or 0 for r in rows) > 0,
      "migrate handed off no unit (trace)")
check(check_unit_lists(rows, "migrate", (3, 8)) > 0, "migrate: no trace line lists its units")

resize, rows = run("resize", "--tp", "2", "--slow", "1:1.6", "--policy", "resize")
learns(resize, "resize")
check(total(rows, "pruned") > 0, "resize pruned no unit (trace)")
check(total(rows, "sent") == 0, "resize handed units off (trace)")
check(check_unit_lists(rows, "resize", (3, 8)) > 0, "resize: no trace line lists its units")
plain, _ = run("plain", "--tp", "2", "--slow", "1:1.6", "--policy", "none")
check(len(resize) == 2 and resize != plain, f"resize trained the same model as none: {resize}")

# same: by default only the last step's values stand in (--same-max-age 1);
# with any age (0) the run warns and, the plan pruning the same units for
# most steps, trains another model.
imputed = {}
for impute, extra in (("average", []), ("same", []), ("same", ["--same-max-age", "0"])):
    name = "-".join(["variation", impute] + extra[1:])
    e, rows = run(name, "--tp", "2", "--slow", "1:1.6", "--policy", "resize",
                  "--select", "variation", "--impute", impute, *extra)
    imputed[name] = e
    learns(e, f"resize, variation, {name}")
    check(total(rows, "pruned") > 0, f"resize, variation, {name} pruned no unit")
    warned = "warning: --same-max-age 0" in last_stderr
    check(warned == (extra != []), f"{name}: the stale-output warning {warned}: {last_stderr}")
check(imputed["variation-same"] != imputed["variation-same-0"],
      f"--same-max-age 1 and 0 trained the same model: {imputed['variation-same']}")

# SEMI's split of stragglers by deficit is the planner's (test/planner);
# here a bad straggler must migrate under semi in training too (a mild one's
# measured speed on this tiny model is too noisy to pin its action).
semi, rows = run("semi", "--tp", "3", "--slow", "1:1.4", "--slow", "2:4", "--policy", "semi",
                 "--select", "variation")
learns(semi, "semi at tp 3, a mild and a bad straggler")
check(total(rows, "sent") > 0, "semi at tp 3 with a bad straggler migrated nothing")

metrics = os.path.join(work, "cpu-clock.json")
cpu, cpu_rows = run("cpu-clock", "--tp", "2", "--slow", "1:3", "--policy", "migrate", "--clock",
                    "cpu", "--metrics", metrics)
check(same(cpu, none), f"migrate on the cpu clock {cpu} differs from none {none}")
check(total(cpu_rows, "sent") > 0, "migrate on the cpu clock handed off no unit (trace)")
with open(metrics) as f:
    m = json.load(f)
check(m.get("clock") == "cpu" and len(m["epochs"]) == 2 and
      all(e.get("model_s", 0) > 0 for e in m["epochs"]), f"cpu clock metrics: {m}")
check(m.get("units_per_rank") == [3, 8], f"units a rank at tp 2 (3 heads, 8 units of 3): {m}")
# A 1000x straggler on the cpu clock: its slowed share is in the modelled
# time (every step ends with it) and nobody waits for it on the wall clock.
metrics = os.path.join(work, "cpu-slow.json")
run("cpu-slow", "--tp", "2", "--slow", "1:1000", "--policy", "none", "--clock", "cpu",
    "--metrics", metrics)
with open(metrics) as f:
    m = json.load(f)
check(len(m["epochs"]) == 2 and all(e["model_s"] > 20 * e["epoch_s"] for e in m["epochs"]),
      "a 1000x straggler on the cpu clock: modelled time not far above the wall time: "
      f"{[(e['model_s'], e['epoch_s']) for e in m['epochs']]}")

# --clock units: the planner sees units x FLOPs x --slow, not timer noise, so
# two runs that differ only in --select get the same plans at the same steps
# (what a paired comparison of selections needs), while they prune different
# units and so train different models. A head's forward books 1 ms at full
# speed, its backward 2: rank 0 keeps its 2 heads in each of 2 layers.
def plans(rows):
    return {(r["iter"], r["rank"]): (r["plan"], r["action"], r["pruned"], r["sent"],
                                     r["received"], r["speed"]) for r in rows}


paired = {}
for select in ("random", "variation"):
    metrics = os.path.join(work, f"units-{select}.json")
    paired[select] = run("units-" + select, "--tp", "3", "--slow", "1:1.6", "--slow", "2:3",
                         "--policy", "resize", "--select", select, "--clock", "units",
                         "--metrics", metrics)
    learns(paired[select][0], f"resize on the units clock, {select}")
    with open(metrics) as f:
        m = json.load(f)
    check(m.get("clock") == "units" and all(e.get("model_s", 0) > 0 for e in m["epochs"]),
          f"units clock metrics: {m}")
(rand, rand_rows), (var, var_rows) = paired["random"], paired["variation"]
check(total(rand_rows, "pruned") > 0, "resize on the units clock pruned no unit")
check(len(rand_rows) == 3 * 80 and plans(rand_rows) == plans(var_rows),
      "the units clock: random and variation selections got different plans")
check(rand != var, f"random and variation pruned the same units: {rand}")
first = [r for r in rand_rows if r["iter"] == 0]
check(all(abs(r["site_seconds"][0] - 0.012 * {0: 1, 1: 1.6, 2: 3}[r["rank"]]) < 1e-12
          for r in first), f"the units clock's booked attention seconds: {first}")
# Beside the model, the hooks' own CPU time (what train_policies.py weighs
# the step by); the cpu clock's lines carry only what the planner saw.
check(all(len(r.get("measured_seconds") or []) == 2 and min(r["measured_seconds"]) > 0
          for r in rand_rows), "the units clock's trace lacks positive measured_seconds")
check(not any("measured_seconds" in r for r in cpu_rows),
      "the cpu clock's trace carries measured_seconds")

print("none:", none)
print("migrate:", migrate)
print("resize:", resize)
print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)

#!/usr/bin/env bash
# The simulator table of bench/RESULTS.md ("Simulator (issue 3)"):
#   bench/sim/run.sh [BUILD_DIR] [extra htp-sim options]
# Builds htp-sim in BUILD_DIR (default build, the README's build folder), runs the default sweep
# (8..4096 ranks, chi 1/2/4, slowdowns 1.5-8, four policies) and prints
# the table plus the two headline checks of issue 3.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
if [ ! -d "$build" ]; then
  cmake -S . -B "$build" -G Ninja -DHTP_ENABLE_MLIR=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target htp-sim >/dev/null
out=$(mktemp)
"$build/tools/htp-sim/htp-sim" "$@" | tee "$out"
echo
awk 'NR > 1 && $4 == "semi" && $1 == 8 {
       if ($5 > worst) { worst = $5; where = $1 " ranks, chi " $2 ", slowdown " $3 }
     }
     NR > 1 && $1 == 4096 && $11 > plan_max { plan_max = $11 }
     NR > 1 && $1 == 4096 && $12 > replan { replan = $12 }
     NR > 1 && $1 == 4096 && $10 > plan_mean { plan_mean = $10 }
     END {
       printf "SEMI at tp = 8, worst steady time/ideal: %.4f (%s) -> %s the 1.10 target\n",
              worst, where, worst <= 1.10 ? "meets" : "MISSES"
       if (plan_max > 0)
         printf "planner at 4096 ranks: worst mean %.1f us/iteration, worst replan (median) %.1f us, worst single iteration %.1f us -> %s the 1 ms target\n",
                plan_mean, replan, plan_max, (plan_mean < 1000 && replan < 1000) ? "meets" : "MISSES"
     }' "$out"
rm -f "$out"

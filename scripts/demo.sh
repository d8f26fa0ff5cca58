#!/usr/bin/env bash
# The main job: set up, then run the example ViT-B/16 block (d=768, 12 heads,
# MLP 3072, 197 tokens, batch 8) through htp-run on the CPU:
#   1. unsharded, on one rank;
#   2. split over 4 ranks (threads) with rank 2 made 3x slower, under the
#      SEMI policy: the runtime detects the straggler and hands its work
#      units to the fast ranks; --check compares with the unsharded block.
# Extra arguments go to the second run (e.g. --policy migrate --trace t.jsonl).
# On a machine with fewer cores than ranks the threads share cores, so other
# ranks are sometimes slow too and the plan follows them.
set -euo pipefail
# --help is this header, before the set-up runs (the other arguments are
# htp-run's, checked by htp-run).
case ${1-} in -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
scripts/setup.sh
run=build/tools/htp-run/htp-run
echo "== 1 rank"
"$run" examples/vit_b16_block.mlir --iters 5
echo
echo "== 4 ranks, rank 2 three times slower, policy semi"
# htp-run gives each rank its share of the cores for BLAS by itself.
exec "$run" examples/vit_b16_block.mlir --tp 4 --slow 2:3 --policy semi --iters 16 --check "$@"

#!/usr/bin/env bash
# The main job: set up, then run the example ViT-B/16 block (d=768, 12 heads,
# MLP 3072, 197 tokens, batch 8) through htp-run on the CPU. Extra arguments
# go to htp-run (e.g. --iters 10 --report json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/tools/htp-run/htp-run examples/vit_b16_block.mlir --iters 5 "$@"

#!/usr/bin/env bash
# scripts/gpu-prepare.sh [OUT_DIR] - the blocks a GPU session runs (issue 8
# item 5), compiled HERE, where MLIR is, with htp-compile: the GPU machine
# builds only the MLIR-free executor and runs these .so files.
#
#   vit_b16_f32_tp1.so   ViT-B/16 block (dim 768, 12 heads, MLP 3072)
#   vit_b16_bf16_tp1.so
#   vit_l16_f32_tp1.so   ViT-L/16 block (dim 1024, 16 heads, MLP 4096)
#   vit_l16_bf16_tp1.so
#   vit_b16_f32_tp4.so   ViT-B/16 split over 4 ranks, with balance hooks
#                        (bf16 blocks get no hooks: f32 for balancing)
# all batch 64, 197 tokens, depth 1; plus blocks.txt (one line per block:
# file, model, dtype, tp, dim, heads, mlp, batch, tokens). No weights: htp-run
# draws seeded random ones, so the folder stays small enough to carry
# (checked: under 64 MiB). OUT_DIR defaults to gpu-blocks/ at the top of the
# tree (ignored by git; name it in the device tool's carry).
# HTP_COMPILE overrides the compiler (default: the newest
# build*/tools/htp-compile/htp-compile: it must know bf16 blocks).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/gpu-blocks}
compile=${HTP_COMPILE:-}
if [ -z "$compile" ]; then
  compile=$(ls -t "$root"/build*/tools/htp-compile/htp-compile 2>/dev/null | head -1)
fi
if [ -z "$compile" ] || [ ! -x "$compile" ]; then
  echo "gpu-prepare: no htp-compile (build the tree with MLIR, or set HTP_COMPILE)" >&2
  exit 1
fi
python=${PYTHON:-python3}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$out/blocks.txt.new"
# name model dim heads mlp dtype tp
while read -r name model dim heads mlp dtype tp; do
  "$python" "$root/examples/gen_vit.py" --depth 1 --dim "$dim" --heads "$heads" --mlp "$mlp" \
    --tokens 197 --batch 64 --dtype "$dtype" -o "$tmp/$name.mlir"
  "$compile" "$tmp/$name.mlir" --tp="$tp" -o "$out/$name.so"
  echo "$name.so $model $dtype $tp $dim $heads $mlp 64 197" >>"$out/blocks.txt.new"
  echo "gpu-prepare: $out/$name.so ($model, $dtype, tp $tp)"
done <<'BLOCKS'
vit_b16_f32_tp1 vit_b16 768 12 3072 f32 1
vit_b16_bf16_tp1 vit_b16 768 12 3072 bf16 1
vit_l16_f32_tp1 vit_l16 1024 16 4096 f32 1
vit_l16_bf16_tp1 vit_l16 1024 16 4096 bf16 1
vit_b16_f32_tp4 vit_b16 768 12 3072 f32 4
BLOCKS
mv "$out/blocks.txt.new" "$out/blocks.txt"
kib=$(du -sk "$out" | cut -f1)
if [ "$kib" -ge $((64 * 1024)) ]; then
  echo "gpu-prepare: $out holds $kib KiB: too large to carry (64 MiB for the whole tree)" >&2
  exit 1
fi
echo "gpu-prepare: $(wc -l <"$out/blocks.txt") blocks, $kib KiB in $out"

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
#   vit_l16_bf16_tp4.so  ViT-L/16 in bf16 split over 4 ranks, with the bf16
#                        hooks (gpu-check's bf16 policies step)
#   vit_b16_f32_tp4_shares.so
#                        the same split unevenly, --shares=1,3,3,3 (rank 0
#                        owns 1 head of 12 and 5 MLP units of 48: gpu-check's
#                        straggler on 8 SMs against 24 ran its MLP units 2.8x
#                        slower on an H200); not in blocks.txt
# all batch 64, 197 tokens, depth 1; plus blocks.txt (one line per block:
# file, model, dtype, tp, dim, heads, mlp, batch, tokens). No weights: htp-run
# draws seeded random ones, so the folder stays small enough to carry.
# For gpu-check's training step (htp-run --train on the CPU and on the GPU):
#   vit_fmnist_tp1.so    a whole ViT (examples/gen_vit.py --model: depth 2,
#                        dim 64, 8 heads, MLP 128, patch 7, 28x28x1 images,
#                        10 classes, batch 64) at tp 1, with @vit_loss_grad
#                        (htp-compile's --grad, on by default) beside @vit_loss
#                        (the eval entry) and @vit; not in blocks.txt
#   vit_fmnist_tp2_spare.so
#                        the same at tp 2 with 50 % spare room (--spare=50):
#                        gpu-check's balanced training (migration, then a
#                        re-partition into the spare slots)
#   train/               the first 2048 training and 512 test images and
#                        labels of Fashion-MNIST, gzipped IDX files under the
#                        names htp-run --train --data DIR reads
#                        (train-images-idx3-ubyte.gz, ...; 32 steps an epoch)
#                        cut from FMNIST_DIR (default Debian's
#                        /usr/share/datasets/fashion-mnist); without it a
#                        warning and no train/ (gpu-check then skips the step)
# About 1.1 MiB for train/ and 36 KiB for the model; the whole folder is
# checked to be under 64 MiB. scripts/gpu-bundle.sh calls this into
# gpu-bundle/blocks (fresh every time), beside the binaries that run them;
# OUT_DIR defaults to gpu-blocks/ at the top of the tree (ignored by git),
# which gpu-check.sh reads when no bundle was carried.
# HTP_COMPILE overrides the compiler (default: the newest
# build*/tools/htp-compile/htp-compile: it must know bf16 blocks).
set -euo pipefail
. "$(dirname "$0")/args.sh"
htp_script_args gpu-prepare "scripts/gpu-prepare.sh [OUT_DIR]" 1 "$@"
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
vit_l16_bf16_tp4 vit_l16 1024 16 4096 bf16 4
BLOCKS
mv "$out/blocks.txt.new" "$out/blocks.txt"

# The uneven split for the policies' straggler (see above).
"$python" "$root/examples/gen_vit.py" --depth 1 --dim 768 --heads 12 --mlp 3072 --tokens 197 \
  --batch 64 -o "$tmp/vit_b16_shares.mlir"
"$compile" "$tmp/vit_b16_shares.mlir" --tp=4 --shares=1,3,3,3 -o "$out/vit_b16_f32_tp4_shares.so"
echo "gpu-prepare: $out/vit_b16_f32_tp4_shares.so (vit_b16, f32, tp 4, shares 1,3,3,3)"

# The training step's model and data (see above).
"$python" "$root/examples/gen_vit.py" --model --depth 2 --dim 64 --heads 8 --mlp 128 --patch 7 \
  --image 28 --channels 1 --classes 10 --batch 64 -o "$tmp/vit_fmnist.mlir"
"$compile" "$tmp/vit_fmnist.mlir" --tp=1 --entry vit_loss_grad -o "$out/vit_fmnist_tp1.so"
echo "gpu-prepare: $out/vit_fmnist_tp1.so (whole ViT with its gradient entry, tp 1)"
"$compile" "$tmp/vit_fmnist.mlir" --tp=2 --spare=50 --entry vit_loss_grad \
  -o "$out/vit_fmnist_tp2_spare.so"
echo "gpu-prepare: $out/vit_fmnist_tp2_spare.so (the same, tp 2 with 50 % spare room)"
fmnist=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
rm -rf "$out/train" "$out/train.new"
if [ -f "$fmnist/train-images-idx3-ubyte.gz" ]; then
  mkdir "$out/train.new"
  # IDX: a zero short, the element type, the rank, then big-endian dims.
  "$python" - "$fmnist" "$out/train.new" <<'SUBSET'
import gzip, struct, sys
source, target = sys.argv[1:3]
for prefix, count in (("train", 2048), ("t10k", 512)):
    for kind, item_bytes in (("images-idx3-ubyte", 28 * 28), ("labels-idx1-ubyte", 1)):
        with gzip.open(f"{source}/{prefix}-{kind}.gz", "rb") as handle:
            magic = handle.read(4)
            dims = struct.unpack(f">{magic[3]}I", handle.read(4 * magic[3]))
            if magic[:3] != b"\0\0\x08" or dims[0] < count:
                sys.exit(f"gpu-prepare: {source}/{prefix}-{kind}.gz is not the IDX file expected")
            data = handle.read(count * item_bytes)
        with gzip.GzipFile(f"{target}/{prefix}-{kind}.gz", "wb", mtime=0) as handle:
            handle.write(magic + struct.pack(f">{len(dims)}I", count, *dims[1:]) + data)
SUBSET
  mv "$out/train.new" "$out/train"
  echo "gpu-prepare: $out/train (2048 training, 512 test images; $(du -sk "$out/train" | cut -f1) KiB)"
else
  echo "gpu-prepare: warning: no Fashion-MNIST in $fmnist (set FMNIST_DIR): no train/," \
       "so gpu-check skips its training step" >&2
fi
kib=$(du -sk "$out" | cut -f1)
if [ "$kib" -ge $((64 * 1024)) ]; then
  echo "gpu-prepare: $out holds $kib KiB: too large to carry (64 MiB for the whole tree)" >&2
  exit 1
fi
echo "gpu-prepare: $(wc -l <"$out/blocks.txt") blocks, $kib KiB in $out"

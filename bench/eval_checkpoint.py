#!/usr/bin/env python3
"""Test accuracy of an htp-run --train checkpoint, computed independently:
the weights (timm names) through test/ref/vit_train_ref.py's NumPy forward
(written from timm's VisionTransformer, not from HTP's kernels), on
Fashion-MNIST's test set normalised as htp-run's loader does (pixel / 255,
then mean 0.2860, std 0.3530: tools/htp-run/train/dataset.h). The accuracy
htp-run reported for the same checkpoint should agree to a few images
(f32 against float64 near ties).

--shed TRACE.jsonl evaluates the model as a resizing run trained it last:
the units each rank pruned under its last plan (the trace's pruned_units,
local ids, written when a plan takes effect) are zeroed in the
checkpoint's copy (a head's columns of attn.proj, an MLP unit's columns
of mlp.fc2: zero imputation), so the pruned model's accuracy can be set
beside the whole model's. Needs --units-per-rank (the metrics'
units_per_rank).

    bench/eval_checkpoint.py bench/out/d6e60/ck.safetensors \\
        --config '{"depth": 6, "dim": 96, "heads": 8, "mlp": 192, "patch": 7,
                   "image": 28, "channels": 1, "classes": 10}'
"""
import argparse
import gzip
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "ref"))
import vit_train_ref  # noqa: E402
from train_policies import int_from  # noqa: E402  (bench/: the scripts' shared checks)

MEAN, STD = 0.2860, 0.3530


def read_idx(path, dims):
    """An IDX file's payload (uint8) with its dims checked: 3 images, 1 labels."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 + 4 * dims or data[2] != 0x08 or data[3] != dims:
        raise ValueError(f"{path}: not an IDX file of uint8 with {dims} dimensions")
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    payload = np.frombuffer(data, np.uint8, offset=4 + 4 * dims)
    if payload.size != np.prod(shape):
        raise ValueError(f"{path}: {payload.size} bytes for shape {shape}")
    return payload.reshape(shape)


def last_pruned(trace):
    """Per rank, the pruned_units of its last line that lists them."""
    last = {}
    with open(trace) as f:
        for line in f:
            row = json.loads(line)
            if "pruned_units" in row:
                last[row["rank"]] = row["pruned_units"]
    if not last:
        raise ValueError(f"{trace}: no line lists pruned_units")
    return last


def units_per_rank_value(text):
    """--units-per-rank: two whole numbers >= 1, heads and MLP units a rank."""
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"'{text}' is not HEADS,MLP_UNITS")
    return [int_from(1)(part) for part in parts]


def zero_shed(params, c, trace, per_rank):
    """Zeroes (in params) the output columns of every unit the trace's last
    plans pruned; returns how many units. Rank r's local unit i of a kind
    is global unit r * per_rank[kind] + i (Megatron's contiguous split)."""
    units_per_rank = ",".join(map(str, per_rank))
    pruned = last_pruned(trace)
    tp = max(pruned) + 1
    widths = [c["dim"] // c["heads"], c["mlp"] // (tp * per_rank[1])]
    if per_rank[0] * tp != c["heads"] or widths[1] * tp * per_rank[1] != c["mlp"]:
        raise ValueError(f"--units-per-rank {units_per_rank} at tp {tp} does not split "
                         f"{c['heads']} heads and MLP {c['mlp']}")
    count = 0
    for rank, pairs in pruned.items():
        for pair, ids in enumerate(pairs):
            kind, layer = pair % 2, pair // 2
            name = f"blocks.{layer}.{'attn.proj' if kind == 0 else 'mlp.fc2'}.weight"
            for i in ids:
                if not 0 <= i < per_rank[kind]:
                    raise ValueError(f"{trace}: rank {rank} pruned unit {i} of kind {kind}, "
                                     f"outside its {per_rank[kind]} (--units-per-rank "
                                     f"{units_per_rank})")
                start = (rank * per_rank[kind] + i) * widths[kind]
                params[name][:, start:start + widths[kind]] = 0
                count += 1
    return count


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="safetensors with timm names (htp-run --checkpoint)")
    p.add_argument("--config", required=True, help="model sizes: JSON (vit_train_ref.py's)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="folder of t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz]")
    p.add_argument("--batch", type=int_from(1), default=500)
    p.add_argument("--shed", help="a resizing run's trace: zero the units its last plan pruned")
    p.add_argument("--units-per-rank", type=units_per_rank_value,
                   help="heads,MLP units a rank (with --shed), each >= 1")
    a = p.parse_args()
    # The paths first, with parser.error (exit 2): read_config takes a path
    # or inline JSON, and a missing file would be read as bad JSON.
    if not os.path.isfile(a.checkpoint):
        p.error(f"checkpoint {a.checkpoint}: no such file")
    if not a.config.lstrip().startswith("{") and not os.path.isfile(a.config):
        p.error(f"--config {a.config}: no such file (and not inline JSON)")
    if not os.path.isdir(a.data):
        p.error(f"--data {a.data}: no such folder")
    if a.shed and not os.path.isfile(a.shed):
        p.error(f"--shed {a.shed}: no such file")
    if a.shed and not a.units_per_rank:
        p.error("--shed needs --units-per-rank HEADS,MLP_UNITS")
    try:
        c = vit_train_ref.read_config(a.config)
        params = vit_train_ref.read_params(a.checkpoint)
        vit_train_ref.check_params(params, c)
        if a.shed:
            zeroed = zero_shed(params, c, a.shed, a.units_per_rank)
        def find(stem):
            for name in (stem + ".gz", stem):
                if os.path.exists(os.path.join(a.data, name)):
                    return os.path.join(a.data, name)
            raise ValueError(f"{a.data}: no {stem}[.gz]")
        images = read_idx(find("t10k-images-idx3-ubyte"), 3)
        labels = read_idx(find("t10k-labels-idx1-ubyte"), 1)
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        if len(images) == 0:
            raise ValueError(f"{a.data}: the test set holds no image")
    except (ValueError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"eval_checkpoint.py: error: {e}", file=sys.stderr)
        return 1
    x = ((images.astype(np.float32) / 255.0 - MEAN) / STD)[:, None]
    right = 0
    for i in range(0, len(x), a.batch):
        logits, _ = vit_train_ref.forward(params, x[i:i + a.batch], c)
        right += int((logits.argmax(1) == labels[i:i + a.batch]).sum())
    what = f", {zeroed} of its units zeroed as {a.shed} last pruned them" if a.shed else ""
    print(f"{a.checkpoint}: test accuracy {100 * right / len(x):.2f} % "
          f"({right} of {len(x)}, NumPy float64 forward{what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

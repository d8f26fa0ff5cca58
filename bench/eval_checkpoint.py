#!/usr/bin/env python3
"""Test accuracy of an htp-run --train checkpoint, computed independently:
the weights (timm names) through test/ref/vit_train_ref.py's NumPy forward
(written from timm's VisionTransformer, not from HTP's kernels), on
Fashion-MNIST's test set normalised as htp-run's loader does (pixel / 255,
then mean 0.2860, std 0.3530: tools/htp-train/dataset.h). The accuracy
htp-run reported for the same checkpoint should agree to a few images
(f32 against float64 near ties).

    bench/eval_checkpoint.py bench/out/d6e60/ck.safetensors \\
        --config '{"depth": 6, "dim": 96, "heads": 8, "mlp": 192, "patch": 7,
                   "image": 28, "channels": 1, "classes": 10}'
"""
import argparse
import gzip
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "ref"))
import vit_train_ref  # noqa: E402

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


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="safetensors with timm names (htp-run --checkpoint)")
    p.add_argument("--config", required=True, help="model sizes: JSON (vit_train_ref.py's)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="folder of t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz]")
    p.add_argument("--batch", type=int, default=500)
    a = p.parse_args()
    try:
        c = vit_train_ref.read_config(a.config)
        params = vit_train_ref.read_params(a.checkpoint)
        vit_train_ref.check_params(params, c)
        def find(stem):
            for name in (stem + ".gz", stem):
                if os.path.exists(os.path.join(a.data, name)):
                    return os.path.join(a.data, name)
            raise ValueError(f"{a.data}: no {stem}[.gz]")
        images = read_idx(find("t10k-images-idx3-ubyte"), 3)
        labels = read_idx(find("t10k-labels-idx1-ubyte"), 1)
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
    except (ValueError, OSError, KeyError) as e:
        print(f"eval_checkpoint.py: error: {e}", file=sys.stderr)
        return 1
    x = ((images.astype(np.float32) / 255.0 - MEAN) / STD)[:, None]
    right = 0
    for i in range(0, len(x), a.batch):
        logits, _ = vit_train_ref.forward(params, x[i:i + a.batch], c)
        right += int((logits.argmax(1) == labels[i:i + a.batch]).sum())
    print(f"{a.checkpoint}: test accuracy {100 * right / len(x):.2f} % "
          f"({right} of {len(x)}, NumPy float64 forward)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

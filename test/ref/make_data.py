#!/usr/bin/env python3
"""Writes test data for htp-run's lit tests, good or deliberately broken.

    make_data.py weights OUT --depth D --dim N --mlp M [--drop NAME] [--shape NAME=AxB]
                             [--extra NAME] [--dtype F32|F16|BF16|F64|I32]
                             [--label NAME=DTYPE]
    make_data.py npy OUT SHAPE [--dtype <f4|<f8|<i4] [--fortran]

Weights are random (seeded) with timm's names, written by check_e2e's
plain-Python safetensors writer unless --dtype asks for another dtype. BF16
is rounded to nearest even (check_e2e.bf16_bits: NumPy bit operations).
--label NAME=DTYPE writes tensor NAME's data as --dtype but names it DTYPE
in the header: a tensor whose bytes do not match its dtype and shape (F32
data labelled BF16 holds twice the bytes its shape needs).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_e2e  # noqa: E402

NUMPY_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I32": "<i4"}


def to_bytes(value, dtype):
    if dtype == "BF16":
        return check_e2e.bf16_bits(value).tobytes()
    return np.ascontiguousarray(value, dtype=NUMPY_DTYPES[dtype]).tobytes()


def write(path, tensors, dtype, labels=None):
    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        data = to_bytes(value, dtype)
        header[name] = {"dtype": (labels or {}).get(name, dtype), "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    w = sub.add_parser("weights")
    w.add_argument("out")
    w.add_argument("--depth", type=int, required=True)
    w.add_argument("--dim", type=int, required=True)
    w.add_argument("--mlp", type=int, required=True)
    w.add_argument("--drop", action="append", default=[])
    w.add_argument("--shape", action="append", default=[])
    w.add_argument("--extra", action="append", default=[])
    w.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16", "F64", "I32"])
    w.add_argument("--label", action="append", default=[])
    n = sub.add_parser("npy")
    n.add_argument("out")
    n.add_argument("shape", help="AxBxC")
    n.add_argument("--dtype", default="<f4")
    n.add_argument("--fortran", action="store_true")
    a = parser.parse_args()

    rng = np.random.default_rng(5)
    if a.kind == "npy":
        shape = [int(d) for d in a.shape.split("x")]
        value = rng.standard_normal(shape).astype(a.dtype)
        np.save(a.out, np.asfortranarray(value) if a.fortran else value)
        return
    tensors = check_e2e.random_weights(rng, a.depth, a.dim, a.mlp)
    for name in a.drop:
        del tensors[name]
    for spec in a.shape:
        name, shape = spec.split("=")
        tensors[name] = rng.standard_normal([int(d) for d in shape.split("x")]).astype(np.float32)
    for name in a.extra:
        tensors[name] = np.zeros([4], np.float32)
    labels = dict(spec.split("=") for spec in a.label)
    if a.dtype == "F32" and not labels:
        check_e2e.write_safetensors(a.out, tensors)
    else:
        write(a.out, tensors, a.dtype, labels)


if __name__ == "__main__":
    main()

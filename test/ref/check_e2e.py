#!/usr/bin/env python3
"""End-to-end numerics check of htp-run against test/ref/vit_ref.py.

Generates a block with examples/gen_vit.py, writes random weights as a
safetensors file (by hand: struct + json, no safetensors package) and a
random input .npy, runs `htp-run --weights --input --output` (with --tp N
ranks: the weights stay global timm tensors, htp-run gives each rank its
slice), and compares the output with the float64 reference:

    max |y - ref| / max |ref| <= 1e-4      -> prints PASS, exit 0
    otherwise (or any failure)             -> prints FAIL and why, exit 1
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vit_ref  # noqa: E402

TOLERANCE = 1e-4


def write_safetensors(path, tensors):
    """tensors: dict name -> float32 array. Data in name order, 8-aligned header."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt", "writer": "test/ref/check_e2e.py"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def random_weights(rng, depth, dim, mlp):
    """Like a trained timm block: unit-ish norms, small weights and biases."""
    shapes = {
        "norm1.weight": [dim], "norm1.bias": [dim],
        "attn.qkv.weight": [3 * dim, dim], "attn.qkv.bias": [3 * dim],
        "attn.proj.weight": [dim, dim], "attn.proj.bias": [dim],
        "norm2.weight": [dim], "norm2.bias": [dim],
        "mlp.fc1.weight": [mlp, dim], "mlp.fc1.bias": [mlp],
        "mlp.fc2.weight": [dim, mlp], "mlp.fc2.bias": [dim],
    }
    weights = {}
    for i in range(depth):
        for suffix in vit_ref.PARAM_SUFFIXES:
            shape = shapes[suffix]
            if suffix.startswith("norm") and suffix.endswith("weight"):
                value = 1.0 + 0.1 * rng.standard_normal(shape)
            elif len(shape) == 2:
                # Larger than timm's 0.02 so attention is not near-uniform.
                value = rng.standard_normal(shape) / np.sqrt(shape[1])
            else:
                value = 0.1 * rng.standard_normal(shape)
            weights[f"blocks.{i}.{suffix}"] = value.astype(np.float32)
    return weights


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--htp-run", required=True, help="path of the htp-run executable")
    parser.add_argument("--gen", required=True, help="path of examples/gen_vit.py")
    parser.add_argument("--workdir", required=True, help="directory for the files it writes")
    parser.add_argument("--depth", type=int, required=True)
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--mlp", type=int, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--gelu", choices=["none", "tanh"], default="none")
    parser.add_argument("--eps", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (htp-run --tp)")
    parser.add_argument("--extra", default="",
                        help="more htp-run arguments, one string split at blanks, e.g. "
                             "\"--policy migrate --slow 1:4 --iters 8\" (--iters or "
                             "--warmup here replace the defaults 1 and 0: htp-run refuses a "
                             "flag given twice)")
    a = parser.parse_args()

    os.makedirs(a.workdir, exist_ok=True)
    block = os.path.join(a.workdir, "block.mlir")
    weights_path = os.path.join(a.workdir, "weights.safetensors")
    input_path = os.path.join(a.workdir, "x.npy")
    output_path = os.path.join(a.workdir, "y.npy")

    subprocess.run([sys.executable, a.gen, "--depth", str(a.depth), "--dim", str(a.dim),
                    "--heads", str(a.heads), "--mlp", str(a.mlp), "--tokens", str(a.tokens),
                    "--batch", str(a.batch), "--gelu", a.gelu, "--eps", repr(a.eps),
                    "-o", block], check=True)

    rng = np.random.default_rng(a.seed)
    weights = random_weights(rng, a.depth, a.dim, a.mlp)
    write_safetensors(weights_path, weights)
    x = rng.standard_normal((a.batch, a.tokens, a.dim)).astype(np.float32)
    np.save(input_path, x)

    extra = a.extra.split()
    defaults = [arg for flag, value in (("--iters", "1"), ("--warmup", "0")) if flag not in extra
                for arg in (flag, value)]
    run = subprocess.run([a.htp_run, block, "--weights", weights_path, "--input", input_path,
                          "--output", output_path, "--tp", str(a.tp)] + defaults + extra,
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL: htp-run exited with {run.returncode}\n{run.stderr}")
        return 1

    y = np.load(output_path)
    ref = vit_ref.vit_blocks(x, weights, a.depth, a.heads, a.eps, a.gelu)
    if y.shape != ref.shape:
        print(f"FAIL: output shape {y.shape}, reference {ref.shape}")
        return 1
    error = float(np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref)))
    verdict = "PASS" if np.isfinite(error) and error <= TOLERANCE else "FAIL"
    print(f"{verdict}: max |y - ref| / max |ref| = {error:.3e} (tolerance {TOLERANCE:g}), "
          f"depth={a.depth} dim={a.dim} heads={a.heads} mlp={a.mlp} tokens={a.tokens} "
          f"batch={a.batch} gelu={a.gelu} eps={a.eps:g} tp={a.tp}"
          + (f" extra='{a.extra}'" if a.extra else ""))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())

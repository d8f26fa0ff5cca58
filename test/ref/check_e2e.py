#!/usr/bin/env python3
"""End-to-end numerics check of htp-run against test/ref/vit_ref.py.

Generates a block with examples/gen_vit.py, writes random weights as a
safetensors file (by hand: struct + json, no safetensors package) and a
random input .npy, runs `htp-run --weights --input --output` (with --tp N
ranks: the weights stay global timm tensors, htp-run gives each rank its
slice), and compares the output with the float64 reference element by
element, at f32 round-off scale:

    |y_i - ref_i| <= R (|ref_i| + rms(ref))  for every element i,
    R = F32_ROUNDOFF (a few x 1e-6)        -> prints PASS, exit 0
    otherwise (or any failure)             -> prints FAIL and why, exit 1

R |ref_i| is a relative bound per element; R rms(ref) keeps it from
shrinking to nothing where an element is a sum that cancels (its round-off
is that of the terms summed, whose size is the tensor's, not the result's).
The line names the worst element (its index, y, ref, the difference and the
bound). As negative controls, the same output against the references of two
wrong models must fail that bound (else FAIL: the check could not tell a
wrong model): the block with the other GELU, and the block whose last fc2
weight row 0 is off by 2e-5 relative (one output channel's MLP part off by
2e-5), which moves that channel by 4e-6 to 1e-5 of the largest element in
the suite's blocks: what the max-relative bound of 1e-5 these checks had
before let through.

With --dtype bf16 the block is a bf16 one (gen_vit.py --dtype bf16), the
weights file holds BF16 tensors (rounded here, to nearest even, with NumPy
bit operations: independent of htp's C rounding) or F32 ones
(--weights-dtype F32: htp-run rounds them on load), the input stays <f4 and
htp-run's output is bf16 widened to <f4. Two references, both float64:

    the f32 block's: the same weights and input, unrounded
        max |y - ref| / max |ref| <= 3e-2  (the bf16 error figure's bound)
    the same with the weights and input rounded to bf16 first
        max |y - ref| / max |ref| <= 2e-2  (what is left is the rounding of
                                            every op's output)

With --matmul-precision tf32|bf16 (an f32 block; htp-run --matmul-precision)
every linear's operands are rounded to that format (b mantissa bits: 10, 7)
before their product. Two float64 references, compared as rms(y - ref) /
rms(ref): the exact block's (`far`), and the block with every linear's
operands rounded the same way (to nearest, ties to even, on the float32
bits, with NumPy bit operations; vit_ref's operand) (`near`):

    far >= 2^-(b+4)        the operands were rounded (an f32 run: ~1e-7)
    near <= 2^-(b+1)       at that format's scale, not a coarser one's
    near <= far / 2        the rounded reference explains most of it

Not an element-wise bound: an operand whose f32 value lies within htp's
and NumPy's f32 differences of a rounding boundary rounds a format ulp
apart in the two (2^-b relative, for ~1e-6 / 2^-b of the elements), so
the rounded reference agrees only statistically. test_kernels' linear
rows hold the kernels to the rounded operands element by element.

--so HTP_COMPILE runs the block compiled ahead of time (htp-compile --tp N)
instead of through htp-run's JIT.
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

EPS32 = float(np.finfo(np.float32).eps)  # 2^-23 = 1.19e-7
# The per-element bound's R (see the docstring): 32 eps32 = 3.8e-6. An output
# element is a residual sum whose terms went through GEMMs of up to ~1024
# terms, and f32 round-off of a K-term dot product grows like sqrt(K) eps
# times its terms (sqrt(1024) = 32). Seen: at most 0.35 of this bound (11
# eps) from htp-run over the suite's blocks (tp 1 to 4, migrate, 4 BLAS
# threads), 0.17 from NumPy's own float32; a wrong model is 2 to 130 times
# over it (the negative controls).
F32_ROUNDOFF = 32 * EPS32
# The wrong weights of the second negative control: the relative change of
# the last block's fc2 weight row 0 (what the MLP adds to output channel 0).
PERTURBATION = 2e-5
# bf16 output against the f32 block's reference, and against the reference
# of the bf16-rounded weights and input.
TOLERANCE_BF16 = 3e-2
TOLERANCE_BF16_ROUNDED = 2e-2


def elementwise_error(got, ref, rel, floor=0.0):
    """How got compares with the float64 reference ref under the bound
    rel * (|ref_i| + rms(ref)) + floor_i per element (floor: a scalar or
    an array of ref's shape, float32_floor's). Returns (worst, text): worst is
    the largest |got_i - ref_i| / bound_i (inf for a shape mismatch or a
    non-finite value; <= 1 passes) and text names that element."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf"), f"shape {got.shape}, reference {ref.shape}"
    if not np.all(np.isfinite(got)):
        index = np.unravel_index(int(np.argmin(np.isfinite(got))), got.shape)
        return float("inf"), f"non-finite value {got[index]} at {list(map(int, index))}"
    rms = float(np.sqrt(np.mean(ref * ref)))
    bound = rel * (np.abs(ref) + rms) + floor
    ratio = np.abs(got - ref) / np.maximum(bound, np.finfo(np.float64).tiny)
    flat = int(np.argmax(ratio))
    index = np.unravel_index(flat, ratio.shape)
    worst = float(ratio[index])
    return worst, (f"worst element {list(map(int, index))}: y {got[index]:.9g}, "
                   f"ref {ref[index]:.9g}, |y - ref| {abs(got[index] - ref[index]):.3e}, "
                   f"bound {bound[index]:.3e}")


# The float32 yardstick: an element-wise bound at f32 round-off scale
# assumes a well-conditioned result. Where it is not (a layer norm over 2
# or 3 channels, a gradient that is a sum of terms that cancel, the class
# token's row), the same math in plain NumPy float32 misses that bound too
# (seen: 3.1 times, where htp-run was at 1.6). So each element's bound also
# allows FLOAT32_YARDSTICK times NumPy float32's own error, that element's
# plus the tensor's rms: a few 1e-7 of the element and of rms(ref) where
# the model is well-conditioned (a fraction of R's terms), and the
# conditioning's own scale where it is not (htp-run's gradients were seen
# at 3 to 5 times NumPy float32's error there, the order of summation).
FLOAT32_YARDSTICK = 8


def float32_floor(ref32, ref):
    """FLOAT32_YARDSTICK x (|ref32_i - ref_i| + rms(ref32 - ref)) per
    element: the floor of elementwise_error for a tensor whose NumPy
    float32 computation is ref32."""
    diff = np.abs(np.asarray(ref32, np.float64) - np.asarray(ref, np.float64))
    return FLOAT32_YARDSTICK * (diff + float(np.sqrt(np.mean(diff * diff))))


MANTISSA_BITS = {"tf32": 10, "bf16": 7}


def round_mantissa(value, kept):
    """value (any float array) as float32, rounded to `kept` mantissa bits
    (to nearest, ties to even, on the float32 bits), returned as float64."""
    bits = np.ascontiguousarray(value, dtype="<f4").view("<u4")
    dropped = np.uint32(23 - kept)
    half = np.uint32((1 << (23 - kept - 1)) - 1)
    with np.errstate(over="ignore"):
        rounded = (bits + half + ((bits >> dropped) & np.uint32(1))) \
            & ~np.uint32((1 << (23 - kept)) - 1)
    return rounded.view("<f4").astype(np.float64).reshape(np.shape(value))


def rms_relative(got, reference):
    """rms(got - reference) / rms(reference), in float64."""
    got, reference = np.asarray(got, np.float64), np.asarray(reference, np.float64)
    return float(np.sqrt(np.mean((got - reference) ** 2)) /
                 max(np.sqrt(np.mean(reference ** 2)), 1e-300))


def reduced_verdict(got, rounded, exact, kept, far_floor):
    """A result at a matmul precision of `kept` mantissa bits against the
    reference with the same operands rounded (near) and the exact one (far):
    near <= far / 2, near <= 2^-(kept+1) and far >= far_floor (the rounding
    happened). Returns (good, near, far)."""
    near, far = rms_relative(got, rounded), rms_relative(got, exact)
    return (near <= far / 2 and near <= 2.0 ** -(kept + 1) and far >= far_floor), near, far


def check_reduced(y, x, weights, a):
    """The f32 block run at --matmul-precision a.matmul_precision against the
    reference with every linear's operands rounded alike, and against the
    exact one (see the docstring). Returns (verdict, lines)."""
    kept = MANTISSA_BITS[a.matmul_precision]
    rounded = vit_ref.vit_blocks(x, weights, a.depth, a.heads, a.eps, a.gelu,
                                 operand=lambda v: round_mantissa(v, kept))
    exact = vit_ref.vit_blocks(x, weights, a.depth, a.heads, a.eps, a.gelu)
    floor = 2.0 ** -(kept + 4)
    good, near, far = reduced_verdict(y, rounded, exact, kept, floor)
    name = a.matmul_precision
    return "PASS" if good else "FAIL", [
        f"rms(y - ref_{name}) / rms(ref_{name}) = {near:.3e} (<= {2.0 ** -(kept + 1):.3g} and "
        f"<= half the next: {'yes' if near <= 2.0 ** -(kept + 1) and near <= far / 2 else 'NO'})",
        f"rms(y - ref) / rms(ref) = {far:.3e} (>= {floor:.3g}: {'yes' if far >= floor else 'NO'})"]


def bf16_bits(value):
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest, ties
    to even, on the float32 bits: add 0x7fff plus the lowest kept bit, keep the
    top half. A NaN stays a NaN (quiet bit set); a finite value past bf16's
    largest rounds to infinity, as the carry into the exponent gives."""
    bits = np.ascontiguousarray(value, dtype="<f4").view("<u4")
    with np.errstate(over="ignore"):
        rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
                   >> np.uint32(16)).astype("<u2")
    nan = np.isnan(np.asarray(value, dtype=np.float32))
    rounded[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x40)).astype("<u2")
    return rounded


def bf16_to_f32(bits):
    """bfloat16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype="<u2").astype("<u4") << np.uint32(16)).view("<f4")


def round_bf16(value):
    """value rounded to the nearest bfloat16, as float32."""
    return bf16_to_f32(bf16_bits(value)).reshape(np.shape(value))


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: dict name -> float32 array, written as F32 or BF16 (rounded
    to nearest even). Data in name order, 8-aligned header."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        if dtype == "BF16":
            data = bf16_bits(tensors[name]).tobytes()
        else:
            data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape),
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


def check_f32(y, x, weights, a):
    """The f32 block against its float64 reference, element by element, and
    the two negative controls. Returns (verdict, lines)."""
    ref = vit_ref.vit_blocks(x, weights, a.depth, a.heads, a.eps, a.gelu)
    ref32 = vit_ref.vit_blocks(x, weights, a.depth, a.heads, a.eps, a.gelu, dtype=np.float32,
                               erf=vit_ref.erf_float32)
    floor = float32_floor(ref32, ref)
    error32 = rms_relative(ref32, ref)
    worst, where = elementwise_error(y, ref, F32_ROUNDOFF, floor)
    verdict = "PASS" if worst <= 1 else "FAIL"
    lines = [f"max_i |y - ref|_i / bound_i = {worst:.3f} with bound_i = "
             f"{F32_ROUNDOFF / EPS32:g} eps32 (|ref_i| + rms(ref)) + {FLOAT32_YARDSTICK} x "
             f"NumPy float32's error (element's + rms; rms {error32:.2e} of rms(ref)) "
             f"({where})"]
    other = "tanh" if a.gelu == "none" else "none"
    perturbed = dict(weights)
    name = f"blocks.{a.depth - 1}.mlp.fc2.weight"
    perturbed[name] = weights[name].astype(np.float64)
    perturbed[name][0, :] *= 1 + PERTURBATION
    controls = [(f"the {other} GELU's reference",
                 vit_ref.vit_blocks(x, weights, a.depth, a.heads, a.eps, other)),
                (f"the reference with {name}[0, :] x (1 + {PERTURBATION:g})",
                 vit_ref.vit_blocks(x, perturbed, a.depth, a.heads, a.eps, a.gelu))]
    for label, wrong in controls:
        worst, where = elementwise_error(y, wrong, F32_ROUNDOFF, floor)
        if not worst > 1:
            verdict = "FAIL"
        coarse = float(np.max(np.abs(y - wrong)) / np.max(np.abs(wrong)))
        lines.append(f"negative control: against {label} {worst:.3g} "
                     f"({'fails the bound' if worst > 1 else 'does NOT fail the bound'}; "
                     f"{where}; max |y - wrong| / max |wrong| = {coarse:.2e})")
    return verdict, lines


def check_bf16(y, x, weights, a):
    """The bf16 block against the f32 block's reference and against the
    reference of the bf16-rounded weights and input, each as
    max |y - ref| / max |ref|. Returns (verdict, lines), verdict None when
    the output is not bf16."""
    if np.any(round_bf16(y) != y):
        print("FAIL: the bf16 block's output holds values that are not bf16")
        return None, []
    rounded = {name: round_bf16(value) for name, value in weights.items()}
    verdict, lines = "PASS", []
    for label, w, inputs, tolerance in (("ref", weights, x, TOLERANCE_BF16),
                                        ("ref_bf16", rounded, round_bf16(x),
                                         TOLERANCE_BF16_ROUNDED)):
        ref = vit_ref.vit_blocks(inputs, w, a.depth, a.heads, a.eps, a.gelu)
        if y.shape != ref.shape:
            print(f"FAIL: output shape {y.shape}, reference {ref.shape}")
            return None, []
        error = float(np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref)))
        if not (np.isfinite(error) and error <= tolerance):
            verdict = "FAIL"
        lines.append(f"max |y - {label}| / max |{label}| = {error:.3e} (tolerance {tolerance:g})")
    return verdict, lines


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
    parser.add_argument("--shares", help="an uneven split, one share per rank, e.g. 3,3,2,1 "
                                         "(htp-run and htp-compile --shares)")
    parser.add_argument("--spare", type=int,
                        help="spare room per rank, percent (htp-run and htp-compile --spare)")
    parser.add_argument("--extra", default="",
                        help="more htp-run arguments, one string split at blanks, e.g. "
                             "\"--policy migrate --slow 1:4 --iters 8\" (--iters or "
                             "--warmup here replace the defaults 1 and 0: htp-run refuses a "
                             "flag given twice)")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                        help="the block's element type (gen_vit.py --dtype)")
    parser.add_argument("--weights-dtype", choices=["F32", "BF16"],
                        help="the safetensors dtype of the weights (default: BF16 for a bf16 "
                             "block, F32 for an f32 one)")
    parser.add_argument("--matmul-precision", choices=["f32", "tf32", "bf16"], default="f32",
                        help="htp-run --matmul-precision (an f32 block); tf32 and bf16 are "
                             "checked against the reference with the linears' operands "
                             "rounded alike")
    parser.add_argument("--so", metavar="HTP_COMPILE",
                        help="compile the block with this htp-compile (--tp N) and run the .so")
    a = parser.parse_args()
    weights_dtype = a.weights_dtype or ("BF16" if a.dtype == "bf16" else "F32")

    os.makedirs(a.workdir, exist_ok=True)
    block = os.path.join(a.workdir, "block.mlir")
    weights_path = os.path.join(a.workdir, "weights.safetensors")
    input_path = os.path.join(a.workdir, "x.npy")
    output_path = os.path.join(a.workdir, "y.npy")

    subprocess.run([sys.executable, a.gen, "--depth", str(a.depth), "--dim", str(a.dim),
                    "--heads", str(a.heads), "--mlp", str(a.mlp), "--tokens", str(a.tokens),
                    "--batch", str(a.batch), "--gelu", a.gelu, "--eps", repr(a.eps),
                    "-o", block] + (["--dtype", "bf16"] if a.dtype == "bf16" else []), check=True)
    if a.so:
        so = os.path.join(a.workdir, "block.so")
        build = subprocess.run([a.so, "--tp", str(a.tp), block, "-o", so]
                               + ([f"--shares={a.shares}"] if a.shares else [])
                               + ([f"--spare={a.spare}"] if a.spare is not None else []),
                               capture_output=True, text=True)
        if build.returncode != 0:
            print(f"FAIL: htp-compile exited with {build.returncode}\n{build.stderr}")
            return 1
        block = so

    rng = np.random.default_rng(a.seed)
    weights = random_weights(rng, a.depth, a.dim, a.mlp)
    write_safetensors(weights_path, weights, weights_dtype)
    x = rng.standard_normal((a.batch, a.tokens, a.dim)).astype(np.float32)
    np.save(input_path, x)

    extra = a.extra.split()
    defaults = [arg for flag, value in (("--iters", "1"), ("--warmup", "0")) if flag not in extra
                for arg in (flag, value)]
    # A .so's signature says its tp, shares and room.
    tp = [] if a.so else (["--tp", str(a.tp)] + (["--shares", a.shares] if a.shares else [])
                          + (["--spare", str(a.spare)] if a.spare is not None else []))
    if a.matmul_precision != "f32" and a.dtype != "f32":
        print("FAIL: --matmul-precision is checked on an f32 block")
        return 1
    precision = (["--matmul-precision", a.matmul_precision]
                 if a.matmul_precision != "f32" else [])
    run = subprocess.run([a.htp_run, block, "--weights", weights_path, "--input", input_path,
                          "--output", output_path] + tp + defaults + precision + extra,
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL: htp-run exited with {run.returncode}\n{run.stderr}")
        return 1

    y = np.load(output_path)
    if y.dtype != np.float32:
        print(f"FAIL: output dtype {y.dtype}, not float32")
        return 1
    shape = (f"depth={a.depth} dim={a.dim} heads={a.heads} mlp={a.mlp} tokens={a.tokens} "
             f"batch={a.batch} gelu={a.gelu} eps={a.eps:g} tp={a.tp}"
             + (f" shares={a.shares}" if a.shares else "")
             + (f" spare={a.spare}" if a.spare is not None else "")
             + (f" dtype={a.dtype} weights={weights_dtype}" if a.dtype != "f32" else "")
             + (" so" if a.so else "") + (f" extra='{a.extra}'" if a.extra else "")
             + (f" matmul_precision={a.matmul_precision}" if a.matmul_precision != "f32"
                else ""))
    if a.matmul_precision != "f32":
        verdict, lines = check_reduced(y, x, weights, a)
    elif a.dtype == "f32":
        verdict, lines = check_f32(y, x, weights, a)
    else:
        verdict, lines = check_bf16(y, x, weights, a)
        if verdict is None:
            return 1
    print(f"{verdict}: {', '.join(lines)}, {shape}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks test/ref/vit_train_ref.py (and optionally htp-run) against timm's
VisionTransformer. Needs torch and timm: without them it prints why and
exits 77 (the skip code of ctest's SKIP_RETURN_CODE and of automake).

It builds timm's model with issue 9's spec F arguments

    VisionTransformer(img_size=S, patch_size=P, in_chans=C, num_classes=K,
                      embed_dim=D, depth=L, num_heads=H, mlp_ratio=M/D,
                      qkv_bias=True, global_pool='token', class_token=True)

(LayerNorm eps --eps, GELU exact or tanh), loads seeded weights into it
(strictly: the NumPy reference's names and shapes must be exactly timm's
state_dict), saves the model's state_dict as WORKDIR/weights.safetensors
(F32, timm names) and random images and one-hot targets as .npy, then
compares, each as max |a - b| / max |b| against the float64 NumPy reference:

    timm (float32) logits and loss            <= 1e-4
    timm (float32) gradient of every param    <= 1e-3 (autograd, mean loss)

With --htp-run PATH it also runs htp-run on --mlir FILE (default: generated
by examples/gen_vit.py --model with the same sizes) with those weights and
data, and checks against the same reference:

    @vit       -> logits
    @vit_loss  -> loss, logits
    @vit_loss_grad (--grads; written by htp-grad) -> loss, logits, then the
               gradient of every parameter in argument order

each element by element at f32 round-off scale, |a_i - b_i| <= R (|b_i| +
rms(b)) (check_e2e.elementwise_error; rms over the tensor: the loss, the
logits, one parameter's gradient) with R = 32 eps32 = 3.8e-6 for the loss
and logits, 64 eps32 = 7.6e-6 for the gradients, each row naming the
worst element. As negative controls, the same outputs against the
references of two wrong models must fail that bound: the model with the
other GELU, and the model whose last fc2 weight row 0 is off by 1e-3
relative.
    --fd (with --grads): htp-run's gradient along a random direction against
               the central difference of htp-run's own @vit_loss  <= 1e-2

--without-torch runs the htp-run checks alone (no timm rows) when torch is
missing, instead of skipping. Weights are "wide" by default (W ~ N(0, 1/in),
LayerNorm weights 1 + 0.1 N, biases, cls_token and pos_embed 0.1 N: attention
far from uniform, every path carrying gradient); --timm-init keeps the
freshly built model's own init instead. Prints PASS and exits 0, or FAIL and
why and exits 1.

    timm_vit_check.py --workdir /tmp/vc
    timm_vit_check.py --workdir /tmp/vc --htp-run build/tools/htp-run/htp-run --grads
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check_e2e  # noqa: E402
import vit_train_ref as ref  # noqa: E402

SKIP = 77
# timm runs its own float32 kernels (and autograd's orders of summation).
TOL_FORWARD = 1e-4
TOL_GRAD = 1e-3
# htp-run against the float64 reference, per element: R of
# check_e2e.elementwise_error. The forward (loss, logits) as check_e2e's
# blocks: 32 eps32 = 3.8e-6 (seen: at most 0.09 of it). A gradient is a
# sum over the batch's tokens of products that cancel, after the whole
# forward and backward: 64 eps32 = 7.6e-6 (seen: at most 23 eps32, tp 1 to
# 3). Against the other GELU's model the logits are 30 to 50 times over
# their bound and the gradients 180 to 500 times; against the perturbed
# model (PERTURBATION_MODEL) the gradients 17 to 100 times.
TOL_HTP = 32 * check_e2e.EPS32
TOL_HTP_GRAD = 64 * check_e2e.EPS32
# The second negative control: the last block's fc2 weight row 0 off by this
# much, relative (check_e2e's 2e-5 moves the logits less than the bound
# here: the head and the final norm dilute one channel).
PERTURBATION_MODEL = 1e-3
# Each element's bound also allows check_e2e.FLOAT32_YARDSTICK times the
# NumPy float32 reference's own error (check_e2e.float32_floor):
# an ill-conditioned gradient (a layer norm over 2 channels) misses the
# f32 round-off bound in plain float32 too.
YARDSTICK_NOTE = f" ({check_e2e.FLOAT32_YARDSTICK} x NumPy float32's error)"
TOL_FD = 1e-2


def wide_weights(c, seed):
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in ref.param_shapes(c).items():
        if ref.is_norm_weight(name):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".weight"):
            fan_in = int(np.prod(shape[1:]))
            value = rng.standard_normal(shape) / np.sqrt(fan_in)
        else:  # biases, cls_token, pos_embed
            value = 0.1 * rng.standard_normal(shape)
        params[name] = value.astype(np.float32)
    return params


def rel_error(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


class Checks:
    def __init__(self):
        self.rows, self.ok = [], True

    def add(self, label, error, tolerance):
        good = np.isfinite(error) and error <= tolerance
        self.ok &= bool(good)
        self.rows.append(f"{'ok  ' if good else 'FAIL'} {label}: {error:.2e} "
                         f"(tolerance {tolerance:g})")

    def add_grads(self, label, grads, expected, tolerance=TOL_GRAD):
        """The worst parameter's error as one row (every failing one as its own)."""
        worst, worst_name = 0.0, ""
        for name in expected:
            if name not in grads:
                self.ok = False
                self.rows.append(f"FAIL {label}: no gradient of {name}")
                continue
            e = rel_error(grads[name], expected[name])
            if not (np.isfinite(e) and e <= tolerance):
                self.add(f"{label} {name}", e, tolerance)
            if e > worst:
                worst, worst_name = e, name
        self.add(f"{label}, worst of {len(expected)} ({worst_name})", worst, tolerance)

    def add_elementwise(self, label, got, expected, rel=TOL_HTP, floor=0.0):
        """|got_i - expected_i| <= rel (|expected_i| + rms(expected)) + floor_i
        for every element (floor: check_e2e.float32_floor): one row with the
        worst element's ratio to its bound."""
        worst, where = check_e2e.elementwise_error(got, expected, rel, floor)
        good = worst <= 1
        self.ok &= bool(good)
        self.rows.append(f"{'ok  ' if good else 'FAIL'} {label}: max_i |a - b|_i / bound_i = "
                         f"{worst:.3g} (bound_i = {rel / check_e2e.EPS32:g} eps32 (|b_i| + "
                         f"rms(b)) + floor_i{YARDSTICK_NOTE}; {where})")
        return worst

    def add_grads_elementwise(self, label, grads, expected, rel=TOL_HTP_GRAD, floors=None):
        """Every parameter's gradient element by element (floors: per name,
        check_e2e.float32_floor); one row for the worst parameter (every
        failing one as its own)."""
        worst, worst_name, worst_where = 0.0, "", ""
        for name in expected:
            if name not in grads:
                self.ok = False
                self.rows.append(f"FAIL {label}: no gradient of {name}")
                continue
            e, where = check_e2e.elementwise_error(grads[name], expected[name], rel,
                                                   floors[name] if floors else 0.0)
            if not e <= 1:
                self.ok = False
                self.rows.append(f"FAIL {label} {name}: max_i |a - b|_i / bound_i = {e:.3g} "
                                 f"({where})")
            if e >= worst:
                worst, worst_name, worst_where = e, name, where
        good = worst <= 1
        self.ok &= bool(good)
        self.rows.append(f"{'ok  ' if good else 'FAIL'} {label}, worst of {len(expected)} "
                         f"({worst_name}): max_i |a - b|_i / bound_i = {worst:.3g} (bound_i = "
                         f"{rel / check_e2e.EPS32:g} eps32 (|b_i| + rms(b)) + the parameter's "
                         f"floor{YARDSTICK_NOTE}; {worst_where})")


def add_reduced(checks, label, got, rounded, exact, kept):
    """htp-run at a matmul precision of `kept` mantissa bits: got against
    the reference whose products with weights take operands rounded alike
    (near) and the exact one (far), as check_e2e.check_reduced: rms relative
    errors, near <= far / 2 and <= 2^-(kept+1), far >= 2^-(kept+6) (the
    rounding happened; a gradient is a sum of many rounded products, so its
    deviation can be a few times smaller than the forward's). Sharp in bf16
    on a well-conditioned model (--timm-init): an operand that is a GEMM's
    f32 sum (p·v, a GELU of one, every dy) carries a few ulps of htp's
    summation error, and where that straddles a rounding boundary the two
    sides round it a format ulp apart: rare in bf16, 16 times as often in
    TF32, whose gradients then fail near <= far / 2 (the kernel tests,
    test_precision.c, hold TF32's backward products element by element)."""
    good, near, far = check_e2e.reduced_verdict(got, rounded, exact, kept, 2.0 ** -(kept + 6))
    checks.ok &= bool(good)
    checks.rows.append(f"{'ok  ' if good else 'FAIL'} {label}: rms relative error {near:.2e} "
                       f"against the rounded reference, {far:.2e} against the exact one")
    return good


def run_timm(c, params, images, targets, checks, expected):
    import torch
    import torch.nn.functional as F
    model = ref.timm_model(c)  # float32, as trained
    ref.load_into(model, params)
    model.eval()
    logits = model(torch.tensor(images))
    loss = F.cross_entropy(logits, torch.tensor(targets))
    loss.backward()
    loss_ref, logits_ref, grads_ref = expected
    checks.add("timm logits vs reference", rel_error(logits.detach().numpy(), logits_ref),
               TOL_FORWARD)
    checks.add("timm loss vs reference", rel_error([loss.item()], [loss_ref]), TOL_FORWARD)
    checks.add_grads("timm gradients vs reference",
                     {n: p.grad.numpy() for n, p in model.named_parameters()}, grads_ref)


def run_htp(a, c, work, weights, images_path, targets_path, checks, expected, wrongs=(),
            rounded=None, expected32=None):
    """rounded: with --matmul-precision, the reference with the linears'
    operands rounded (htp-run's logits and gradients are held to it by
    add_reduced instead of element by element). expected32: the same in
    NumPy float32, whose errors give each tensor's floor."""
    loss_ref, logits_ref, grads_ref = expected
    floor = check_e2e.float32_floor
    loss_floor = floor([expected32[0]], [loss_ref]) if expected32 else 0.0
    logits_floor = floor(expected32[1], logits_ref) if expected32 else 0.0
    grad_floors = ({n: floor(expected32[2][n], grads_ref[n]) for n in grads_ref}
                   if expected32 else None)
    mlir = a.mlir
    if not mlir:
        mlir = os.path.join(work, "vit.mlir")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gen_vit.py"), "--model",
                        "--depth", str(c["depth"]), "--dim", str(c["dim"]),
                        "--heads", str(c["heads"]), "--mlp", str(c["mlp"]),
                        "--patch", str(c["patch"]), "--image", str(c["image"]),
                        "--channels", str(c["channels"]), "--classes", str(c["classes"]),
                        "--batch", str(a.batch), "--eps", repr(c["eps"]), "--gelu", c["gelu"],
                        "-o", mlir], check=True)

    def htp(entry, inputs, count, weights=weights):
        outs = [os.path.join(work, f"{entry}.{i}.npy") for i in range(count)]
        cmd = [a.htp_run, mlir, "--entry", entry, "--weights", weights, "--tp", str(a.tp),
               "--iters", "1", "--warmup", "0"]
        if a.matmul_precision != "f32":
            cmd += ["--matmul-precision", a.matmul_precision]
        for path in inputs:
            cmd += ["--input", path]
        for path in outs:
            cmd += ["--output", path]
        try:
            run = subprocess.run(cmd + a.extra.split(), capture_output=True, text=True)
        except OSError as e:
            checks.ok = False
            checks.rows.append(f"FAIL htp-run --entry {entry}: {e}")
            return None
        if run.returncode != 0:
            checks.ok = False
            checks.rows.append(f"FAIL htp-run --entry {entry} exited with {run.returncode}: "
                               f"{run.stderr.strip()[-2000:]}")
            return None
        return [np.load(p) for p in outs]

    if rounded:
        kept = check_e2e.MANTISSA_BITS[a.matmul_precision]
        names = list(ref.param_shapes(c))
        out = htp("vit_loss_grad", [images_path, targets_path], 2 + len(names))
        if out:
            add_reduced(checks, "htp-run @vit_loss_grad logits", out[1], rounded[1], logits_ref,
                        kept)
            for name, got in zip(names, out[2:]):
                add_reduced(checks, f"htp-run gradient of {name}", got, rounded[2][name],
                            grads_ref[name], kept)
        return
    out = htp("vit", [images_path], 1)
    if out:
        checks.add_elementwise("htp-run @vit logits vs reference", out[0], logits_ref,
                               floor=logits_floor)
    out = htp("vit_loss", [images_path, targets_path], 2)
    if out:
        checks.add_elementwise("htp-run @vit_loss loss vs reference", out[0].reshape(-1),
                               [loss_ref], floor=loss_floor)
        checks.add_elementwise("htp-run @vit_loss logits vs reference", out[1], logits_ref,
                               floor=logits_floor)
    if a.grads:
        names = list(ref.param_shapes(c))
        out = htp("vit_loss_grad", [images_path, targets_path], 2 + len(names))
        if out:
            checks.add_elementwise("htp-run @vit_loss_grad loss vs reference",
                                   out[0].reshape(-1), [loss_ref], floor=loss_floor)
            checks.add_elementwise("htp-run @vit_loss_grad logits vs reference", out[1],
                                   logits_ref, floor=logits_floor)
            checks.add_grads_elementwise("htp-run gradients vs reference",
                                         dict(zip(names, out[2:])), grads_ref,
                                         floors=grad_floors)
            for what, wrong in wrongs:
                # Negative control: the same outputs against the reference
                # of a wrong model must fail these checks.
                control = Checks()
                control.add_elementwise("logits", out[1], wrong[1], floor=logits_floor)
                control.add_grads_elementwise("gradients", dict(zip(names, out[2:])), wrong[2],
                                              floors=grad_floors)
                checks.ok &= not control.ok
                checks.rows.append(f"{'ok  ' if not control.ok else 'FAIL'} negative control: "
                                   f"htp-run's outputs against the reference of {what} "
                                   f"{'fail' if not control.ok else 'PASS (the bound cannot tell a wrong model)'}: "
                                   f"{control.rows[0][5:]}; {control.rows[-1][5:]}")
            if a.fd:
                finite_difference(htp, work, weights, dict(zip(names, out[2:])), images_path,
                                  targets_path, checks, a.seed)


def finite_difference(htp, work, weights, grads, images_path, targets_path, checks, seed):
    """htp-run's gradient against htp-run's own loss, with no reference in
    between: along a random direction d (every parameter at once), the
    central difference (L(w + h d) - L(w - h d)) / 2h against <grad, d>. h
    makes the loss move by about 3e-3, far above f32 round-off in the loss
    (~1e-6) and small enough that the O(h^2) term stays below 1e-3."""
    params = ref.read_safetensors(weights)
    rng = np.random.default_rng(seed + 2)
    direction = {n: rng.standard_normal(v.shape) for n, v in params.items()}
    slope = sum(float(np.sum(grads[n].astype(np.float64) * direction[n])) for n in params)
    h = 3e-3 / max(abs(slope), 1e-12)
    losses = []
    for sign in (1, -1):
        path = os.path.join(work, f"fd{'+' if sign > 0 else '-'}.safetensors")
        check_e2e.write_safetensors(path, {n: (v + sign * h * direction[n]).astype(np.float32)
                                           for n, v in params.items()})
        out = htp("vit_loss", [images_path, targets_path], 2, weights=path)
        if not out:
            return
        losses.append(float(out[0].reshape(-1)[0]))
    estimate = (losses[0] - losses[1]) / (2 * h)
    checks.add("htp-run gradient vs its own loss's central difference (random direction)",
               rel_error([slope], [estimate]), TOL_FD)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, help="directory for the files it writes")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--mlp", type=int, default=128)
    parser.add_argument("--patch", type=int, default=4)
    parser.add_argument("--image", type=int, default=28)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--eps", type=float, default=1e-6)
    parser.add_argument("--gelu", choices=["none", "tanh"], default="none")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--timm-init", action="store_true",
                        help="keep timm's own init weights instead of the wide seeded ones")
    parser.add_argument("--htp-run", help="also check this htp-run")
    parser.add_argument("--mlir", help="the module htp-run runs (default: gen_vit.py --model)")
    parser.add_argument("--grads", action="store_true",
                        help="with --htp-run: also check @vit_loss_grad's gradients")
    parser.add_argument("--fd", action="store_true",
                        help="with --grads: also check htp-run's gradient against a central "
                             "difference of its own loss along a random direction")
    parser.add_argument("--tp", type=int, default=1, help="htp-run --tp (default 1)")
    parser.add_argument("--extra", default="", help="more htp-run arguments, split at blanks")
    parser.add_argument("--matmul-precision", choices=["f32", "tf32", "bf16"], default="f32",
                        help="htp-run --matmul-precision (with --grads): the logits and "
                             "gradients against the reference whose products with weights "
                             "take operands rounded alike (rms, as check_e2e.py)")
    parser.add_argument("--without-torch", action="store_true",
                        help="without torch/timm, run the htp-run checks alone instead of "
                             "skipping")
    a = parser.parse_args()
    c = ref.read_config(json_config(a))

    try:
        import torch  # noqa: F401
        import timm  # noqa: F401
        have_torch = True
    except ImportError as e:
        have_torch = False
        why = str(e)
    if not have_torch and not (a.without_torch and a.htp_run):
        print(f"SKIP: torch and timm are needed ({why})")
        return SKIP
    if (a.mlir or a.grads) and not a.htp_run:
        parser.error("--mlir and --grads go with --htp-run")
    if a.fd and not a.grads:
        parser.error("--fd goes with --grads")
    if a.matmul_precision != "f32" and (not a.grads or a.fd):
        parser.error("--matmul-precision goes with --grads (and not --fd)")

    os.makedirs(a.workdir, exist_ok=True)
    weights_path = os.path.join(a.workdir, "weights.safetensors")
    images_path = os.path.join(a.workdir, "images.npy")
    targets_path = os.path.join(a.workdir, "targets.npy")
    rng = np.random.default_rng(a.seed + 1)
    images = rng.standard_normal((a.batch, c["channels"], c["image"], c["image"])).astype(
        np.float32)
    targets = np.eye(c["classes"], dtype=np.float32)[rng.integers(0, c["classes"], a.batch)]
    np.save(images_path, images)
    np.save(targets_path, targets)

    checks = Checks()
    if have_torch:
        model = ref.timm_model(c)
        names = list(model.state_dict())
        expected_names = list(ref.param_shapes(c))
        if names != expected_names:
            print(f"FAIL: timm's state_dict names/order differ from the reference's:\n"
                  f"  timm: {names}\n  ref:  {expected_names}")
            return 1
        if not a.timm_init:
            ref.load_into(model, wide_weights(c, a.seed))
        state = {n: t.detach().numpy().astype(np.float32) for n, t in model.state_dict().items()}
    else:
        state = wide_weights(c, a.seed) if not a.timm_init else ref.init_params(c, a.seed)
    check_e2e.write_safetensors(weights_path, state)
    params = ref.read_safetensors(weights_path)  # what every side reads
    ref.check_params(params, c)
    expected = ref.loss_and_grads(params, images, targets, c)

    if have_torch:
        run_timm(c, params, images, targets, checks, expected)
    else:
        checks.rows.append("skip timm rows: torch/timm do not import (--without-torch)")
    if a.htp_run:
        wrongs = []
        if a.grads:
            other = dict(c, gelu="tanh" if c["gelu"] == "none" else "none")
            wrongs.append((f"the {other['gelu']} GELU's model",
                           ref.loss_and_grads(params, images, targets, other)))
            name = f"blocks.{c['depth'] - 1}.mlp.fc2.weight"
            perturbed = dict(params)
            perturbed[name] = params[name].astype(np.float64)
            perturbed[name][0, :] *= 1 + PERTURBATION_MODEL
            wrongs.append((f"the model with {name}[0, :] x (1 + {PERTURBATION_MODEL:g})",
                           ref.loss_and_grads(perturbed, images, targets, c)))
        rounded = None
        if a.matmul_precision != "f32":
            kept = check_e2e.MANTISSA_BITS[a.matmul_precision]
            rounded = ref.loss_and_grads(params, images, targets, c,
                                         operand=lambda v: check_e2e.round_mantissa(v, kept))
        expected32 = ref.loss_and_grads(params, images, targets, c, dtype=np.float32)
        run_htp(a, c, a.workdir, weights_path, images_path, targets_path, checks, expected,
                wrongs, rounded, expected32)

    sizes = " ".join(f"{k}={c[k]}" for k in ref.CONFIG_KEYS) + \
        f" batch={a.batch} eps={c['eps']:g} gelu={c['gelu']}" + \
        (" timm-init" if a.timm_init else "") + (f" tp={a.tp}" if a.htp_run else "") + \
        (f" matmul_precision={a.matmul_precision}" if a.matmul_precision != "f32" else "")
    print("\n".join(checks.rows))
    print(f"{'PASS' if checks.ok else 'FAIL'}: loss {expected[0]:.6f}, {sizes}")
    return 0 if checks.ok else 1


def json_config(a):
    import json
    return json.dumps({k: getattr(a, k) for k in ref.CONFIG_KEYS + ("eps", "gelu")})


if __name__ == "__main__":
    sys.exit(main())

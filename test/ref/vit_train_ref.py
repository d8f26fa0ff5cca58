#!/usr/bin/env python3
"""An independent NumPy reference of a whole ViT's training step: the loss,
the logits and the gradient of the mean loss w.r.t. every parameter.

Written from the math of timm's VisionTransformer (issue 9's spec F:
global_pool='token', class_token=True, qkv_bias=True, no pre-norm, no
fc_norm), not from HTP's kernels or passes:

    patches  images [B,C,S,S] cut into P x P patches, row-major over the patch
             grid, each patch a vector ordered (c, ky, kx): the Conv2d
             patch_embed.proj is a linear with its weight seen as [D, C*P*P]
    x        [cls_token; patches @ W.T + b] + pos_embed       [B, N+1, D]
    blocks   test/ref/vit_ref.py's (pre-norm timm Block)
    logits   head(norm(x)[:, 0])                               [B, K]
    loss     mean over rows of -sum_k t_k log softmax(logits)_k
             (targets t are class probabilities: PyTorch's cross_entropy
             with probability targets; one-hot rows for labels)

The backward is written by hand (no autograd) and checked by --self-test
against central finite differences on a tiny model in float64, and, when
torch and timm import, against torch autograd on timm's VisionTransformer
holding the same weights.

    vit_train_ref.py --params P.safetensors|P.npz --images X.npy --targets T.npy \\
                     --config CONFIG -o OUT.npz|OUT.safetensors
        CONFIG is a JSON object (inline or a file) with depth, dim, heads,
        mlp, patch, image, channels, classes and optionally eps (1e-6) and
        gelu ("none" or "tanh"). Images are [B, C, S, S]; targets [B, K]
        (probabilities) or [B] (integer labels, made one-hot). OUT holds
        "loss" [1], "logits" [B, K] and "grad.<timm name>" for every
        parameter (htp's signature names its gradient results so), all
        float32 unless --float64 (npz only). Computed in float64.
    vit_train_ref.py --write-init P.safetensors --config CONFIG [--seed S]
        random weights like timm's init: trunc-normal (std 0.02, cut at 2
        std) for every linear/conv weight and pos_embed, normal std 1e-6 for
        cls_token, zero biases, LayerNorm weight 1 and bias 0.
    vit_train_ref.py --self-test
        the gradient checks above, a one-hot loss against -log p[label], and
        examples/gen_vit.py --model's parameter list (names, order, shapes)
        against this one's; exit 0 and PASS, or 1 and FAIL.

NumPy only (torch is optional, for the self-test's second check).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_e2e  # noqa: E402  (the plain-Python safetensors writer)
import vit_ref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG_KEYS = ("depth", "dim", "heads", "mlp", "patch", "image", "channels", "classes")


# ---------------------------------------------------------------- config, names

def read_config(text):
    """CONFIG: inline JSON or the path of a JSON file -> checked dict."""
    if os.path.exists(text):
        with open(text) as f:
            text = f.read()
    config = json.loads(text)
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        raise ValueError(f"config lacks {', '.join(missing)}")
    out = {k: int(config[k]) for k in CONFIG_KEYS}
    out["eps"] = float(config.get("eps", 1e-6))
    out["gelu"] = config.get("gelu", "none")
    if out["gelu"] not in ("none", "tanh"):
        raise ValueError(f"config gelu must be none or tanh, got {out['gelu']!r}")
    if any(out[k] < 1 for k in CONFIG_KEYS):
        raise ValueError("config sizes must be >= 1")
    if out["dim"] % out["heads"]:
        raise ValueError("config dim must be a multiple of heads")
    if out["image"] % out["patch"]:
        raise ValueError("config image must be a multiple of patch")
    return out


def param_shapes(c):
    """{timm name: shape} in timm's state_dict order."""
    d, m, p = c["dim"], c["mlp"], c["patch"]
    tokens = (c["image"] // p) ** 2 + 1
    shapes = {"cls_token": (1, 1, d), "pos_embed": (1, tokens, d),
              "patch_embed.proj.weight": (d, c["channels"], p, p),
              "patch_embed.proj.bias": (d,)}
    block = {"norm1.weight": (d,), "norm1.bias": (d,), "attn.qkv.weight": (3 * d, d),
             "attn.qkv.bias": (3 * d,), "attn.proj.weight": (d, d), "attn.proj.bias": (d,),
             "norm2.weight": (d,), "norm2.bias": (d,), "mlp.fc1.weight": (m, d),
             "mlp.fc1.bias": (m,), "mlp.fc2.weight": (d, m), "mlp.fc2.bias": (d,)}
    for i in range(c["depth"]):
        for suffix in vit_ref.PARAM_SUFFIXES:
            shapes[f"blocks.{i}.{suffix}"] = block[suffix]
    shapes.update({"norm.weight": (d,), "norm.bias": (d,), "head.weight": (c["classes"], d),
                   "head.bias": (c["classes"],)})
    return shapes


def is_norm_weight(name):
    """norm1.weight, norm2.weight, norm.weight: LayerNorm gammas."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[-2].startswith("norm") and parts[-1] == "weight"


def check_params(params, c):
    shapes = param_shapes(c)
    missing = [n for n in shapes if n not in params]
    extra = [n for n in params if n not in shapes]
    if missing or extra:
        raise ValueError(f"parameters: missing {missing}, unexpected {extra}")
    for name, shape in shapes.items():
        if tuple(params[name].shape) != shape:
            raise ValueError(f"{name}: shape {list(params[name].shape)}, expected {list(shape)}")


# ---------------------------------------------------------------- forward pieces

def patchify(images, patch):
    """[B, C, S, S] -> [B, N, C*P*P]: patches in row-major grid order, each
    vector ordered (c, ky, kx) like the Conv2d weight [D, C, P, P]."""
    b, ch, h, w = images.shape
    gy, gx = h // patch, w // patch
    x = images.reshape(b, ch, gy, patch, gx, patch).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b, gy * gx, ch * patch * patch)


def gelu_and_grad(x, approximate):
    """(GELU(x), GELU'(x))."""
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        u = k * (x + 0.044715 * x ** 3)
        t = np.tanh(u)
        return (0.5 * x * (1.0 + t),
                0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x))
    # erf in x's precision: a float32 run (the checkers' yardstick) stays float32.
    cdf = 0.5 * (1.0 + vit_ref._erf(x / math.sqrt(2.0)).astype(x.dtype, copy=False))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return x * cdf, cdf + x * pdf


def layer_norm_fwd(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    return xhat * gamma + beta, (xhat, rstd, gamma)


def layer_norm_bwd(dy, cache):
    """-> dx, dgamma, dbeta."""
    xhat, rstd, gamma = cache
    axes = tuple(range(dy.ndim - 1))
    dgamma = (dy * xhat).sum(axis=axes)
    dbeta = dy.sum(axis=axes)
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True)
                 - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dgamma, dbeta


def _same(value):
    return value


def linear_bwd(x, w, dy, op=_same):
    """y = x @ w.T + b over the last dim -> dx, dw, db. op: the matmul
    precision's rounding of each product's operands (forward's docstring)."""
    x2 = x.reshape(-1, x.shape[-1])
    dy2 = dy.reshape(-1, dy.shape[-1])
    return op(dy) @ op(w), op(dy2).T @ op(x2), dy2.sum(axis=0)


def attention_fwd(x, wqkv, bqkv, wproj, bproj, heads, op=_same):
    b, n, d = x.shape
    hd = d // heads
    qkv = (op(x) @ op(wqkv).T + bqkv).reshape(b, n, 3, heads, hd).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]                        # [B, H, N, hd]
    scale = 1.0 / math.sqrt(hd)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(b, n, d)     # heads concatenated
    return op(o) @ op(wproj).T + bproj, (x, q, k, v, p, o, wqkv, wproj, heads, scale, op)


def attention_bwd(dy, cache):
    """-> dx, dwqkv, dbqkv, dwproj, dbproj."""
    x, q, k, v, p, o, wqkv, wproj, heads, scale, op = cache
    b, n, d = x.shape
    hd = d // heads
    do, dwproj, dbproj = linear_bwd(o, wproj, dy, op)
    do = do.reshape(b, n, heads, hd).transpose(0, 2, 1, 3)  # [B, H, N, hd]
    dp = do @ v.transpose(0, 1, 3, 2)
    dv = p.transpose(0, 1, 3, 2) @ do
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) * scale
    dq = ds @ k
    dk = ds.transpose(0, 1, 3, 2) @ q
    dqkv = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(b, n, 3 * d)
    dx, dwqkv, dbqkv = linear_bwd(x, wqkv, dqkv, op)
    return dx, dwqkv, dbqkv, dwproj, dbproj


def cross_entropy(logits, targets):
    """-> (mean loss, dlogits for d loss = 1). dlogits = (softmax * sum t - t) / B,
    the exact gradient for any targets."""
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    rows = logits.shape[0]
    loss = -(targets * logp).sum() / rows
    dlogits = (np.exp(logp) * targets.sum(axis=-1, keepdims=True) - targets) / rows
    return loss, dlogits


# ---------------------------------------------------------------- whole model

def forward(params, images, c, dtype=np.float64, operand=None):
    """-> (logits, cache for backward). operand, when given, is applied to
    both operands of every product with a weight before it, here and in
    backward (the linears' x @ W.T, dy @ W and dy.T @ x; not attention's own
    products): a matmul precision (htp-run --matmul-precision) rounds them."""
    op = operand or _same
    w = {n: np.asarray(v, dtype=dtype) for n, v in params.items()}
    images = np.asarray(images, dtype=dtype)
    d, eps, heads = c["dim"], c["eps"], c["heads"]
    patches = patchify(images, c["patch"])
    t = op(patches) @ op(w["patch_embed.proj.weight"].reshape(d, -1)).T \
        + w["patch_embed.proj.bias"]
    b = images.shape[0]
    cls = np.broadcast_to(w["cls_token"], (b, 1, d))
    x = np.concatenate([cls, t], axis=1) + w["pos_embed"]
    blocks = []
    for i in range(c["depth"]):
        p = lambda s: w[f"blocks.{i}.{s}"]
        h1, ln1 = layer_norm_fwd(x, p("norm1.weight"), p("norm1.bias"), eps)
        a, att = attention_fwd(h1, p("attn.qkv.weight"), p("attn.qkv.bias"),
                               p("attn.proj.weight"), p("attn.proj.bias"), heads, op)
        r1 = x + a
        h2, ln2 = layer_norm_fwd(r1, p("norm2.weight"), p("norm2.bias"), eps)
        f1 = op(h2) @ op(p("mlp.fc1.weight")).T + p("mlp.fc1.bias")
        g, dg = gelu_and_grad(f1, c["gelu"])
        x = r1 + op(g) @ op(p("mlp.fc2.weight")).T + p("mlp.fc2.bias")
        blocks.append((ln1, att, ln2, h2, g, dg))
    normed, lnf = layer_norm_fwd(x, w["norm.weight"], w["norm.bias"], eps)
    pooled = normed[:, 0]
    logits = op(pooled) @ op(w["head.weight"]).T + w["head.bias"]
    return logits, (w, patches, x.shape, blocks, lnf, pooled, op)


def backward(dlogits, cache, c):
    """d(loss)/d(param) for every timm name, given d(loss)/d(logits)."""
    w, patches, shape, blocks, lnf, pooled, op = cache
    grads = {}
    dpooled, grads["head.weight"], grads["head.bias"] = linear_bwd(pooled, w["head.weight"],
                                                                   dlogits, op)
    dnormed = np.zeros(shape, dtype=dlogits.dtype)
    dnormed[:, 0] = dpooled
    dx, grads["norm.weight"], grads["norm.bias"] = layer_norm_bwd(dnormed, lnf)
    for i in reversed(range(c["depth"])):
        ln1, att, ln2, h2, g, dg = blocks[i]
        n = lambda s: f"blocks.{i}.{s}"
        # x_out = r1 + fc2(gelu(fc1(norm2(r1))))
        dgout, grads[n("mlp.fc2.weight")], grads[n("mlp.fc2.bias")] = linear_bwd(
            g, w[n("mlp.fc2.weight")], dx, op)
        dh2, grads[n("mlp.fc1.weight")], grads[n("mlp.fc1.bias")] = linear_bwd(
            h2, w[n("mlp.fc1.weight")], dgout * dg, op)
        dr1, grads[n("norm2.weight")], grads[n("norm2.bias")] = layer_norm_bwd(dh2, ln2)
        dr1 = dr1 + dx
        # r1 = x + attn(norm1(x))
        dh1, grads[n("attn.qkv.weight")], grads[n("attn.qkv.bias")], \
            grads[n("attn.proj.weight")], grads[n("attn.proj.bias")] = attention_bwd(dr1, att)
        dx, grads[n("norm1.weight")], grads[n("norm1.bias")] = layer_norm_bwd(dh1, ln1)
        dx = dx + dr1
    grads["pos_embed"] = dx.sum(axis=0, keepdims=True)
    grads["cls_token"] = dx[:, :1].sum(axis=0, keepdims=True)
    dt = dx[:, 1:]
    d = c["dim"]
    _, dwpe, grads["patch_embed.proj.bias"] = linear_bwd(
        patches, w["patch_embed.proj.weight"].reshape(d, -1), dt, op)
    grads["patch_embed.proj.weight"] = dwpe.reshape(w["patch_embed.proj.weight"].shape)
    return {name: grads[name] for name in param_shapes(c)}


def loss_and_grads(params, images, targets, c, dtype=np.float64, operand=None):
    """-> (loss, logits, {name: gradient of the mean loss})."""
    logits, cache = forward(params, images, c, dtype, operand)
    loss, dlogits = cross_entropy(logits, np.asarray(targets, dtype=dtype))
    return loss, logits, backward(dlogits, cache, c)


def loss_only(params, images, targets, c):
    logits, _ = forward(params, images, c)
    return cross_entropy(logits, np.asarray(targets, dtype=np.float64))[0]


# ---------------------------------------------------------------- files

SAFETENSORS_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def read_safetensors(path):
    """-> {name: float array} (F32, F64, F16 or BF16 tensors)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    base = 8 + size
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[base + start:base + end]
        if info["dtype"] == "BF16":
            value = check_e2e.bf16_to_f32(np.frombuffer(raw, dtype="<u2"))
        elif info["dtype"] in SAFETENSORS_DTYPES:
            value = np.frombuffer(raw, dtype=SAFETENSORS_DTYPES[info["dtype"]])
        else:
            raise ValueError(f"{path}: {name} has dtype {info['dtype']}, not a float type")
        out[name] = value.reshape(info["shape"]).copy()
    return out


def checkpoints_differ_by(a, b, tolerance=1e-4):
    """The largest difference between two training checkpoints (weights in
    a / b, moments in a.optim / b.optim), each tensor's relative to its
    largest value; AssertionError where one exceeds tolerance. Runs that
    differ only in the order of sums (a split, a device, a migration) must
    agree this way. The key bias is left out: it has no gradient but
    rounding (it adds the same q . b_k to every logit of a row, which
    softmax ignores), and AdamW scales that noise up to the learning rate,
    so its values are a random walk any change of summation order changes;
    the q and v biases are compared."""
    worst = 0.0
    for suffix in ("", ".optim"):
        x, y = read_safetensors(a + suffix), read_safetensors(b + suffix)
        assert x.keys() == y.keys(), (sorted(x), sorted(y))
        for k in x:
            assert x[k].shape == y[k].shape, k
            u, w = x[k], y[k]
            if k.endswith("attn.qkv.bias"):
                third = u.shape[0] // 3
                u = np.concatenate([u[:third], u[2 * third:]])
                w = np.concatenate([w[:third], w[2 * third:]])
            scale = float(np.max(np.abs(u))) or 1.0
            error = float(np.max(np.abs(u - w))) / scale
            assert error < tolerance, (a + suffix, b + suffix, k, error)
            worst = max(worst, error)
    return worst


def read_params(path):
    if path.endswith(".npz"):
        with np.load(path) as z:
            return {name: z[name] for name in z.files}
    return read_safetensors(path)


def init_params(c, seed):
    """timm-like init (see the module doc), float32."""
    rng = np.random.default_rng(seed)

    def trunc_normal(shape, std=0.02):
        value = rng.standard_normal(shape)
        while True:  # redraw what lies beyond 2 std
            bad = np.abs(value) > 2.0
            if not bad.any():
                return (value * std).astype(np.float32)
            value[bad] = rng.standard_normal(int(bad.sum()))

    params = {}
    for name, shape in param_shapes(c).items():
        if name == "cls_token":
            params[name] = (1e-6 * rng.standard_normal(shape)).astype(np.float32)
        elif name.endswith(".bias"):
            params[name] = np.zeros(shape, np.float32)
        elif is_norm_weight(name):
            params[name] = np.ones(shape, np.float32)
        else:
            params[name] = trunc_normal(shape)
    return params


# ---------------------------------------------------------------- self-test

def random_case(c, seed, scale=0.3):
    """Weights larger than timm's init, so every path carries gradient; soft
    targets whose rows do not sum to 1 (the exact gradient covers them)."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(c).items():
        base = 1.0 if is_norm_weight(name) else 0.0
        params[name] = base + scale * rng.standard_normal(shape)
    images = rng.standard_normal((2, c["channels"], c["image"], c["image"]))
    targets = rng.random((2, c["classes"]))
    targets[0] /= targets[0].sum()
    return params, images, targets


def finite_difference_check(c, seed, h=1e-5, tolerance=1e-6):
    """Every parameter element by central differences; -> (worst relative error, line)."""
    params, images, targets = random_case(c, seed)
    _, _, grads = loss_and_grads(params, images, targets, c)
    worst, worst_name = 0.0, ""
    for name, value in params.items():
        fd = np.zeros_like(value)
        flat, fdflat = value.reshape(-1), fd.reshape(-1)
        for j in range(flat.size):
            keep = flat[j]
            flat[j] = keep + h
            up = loss_only(params, images, targets, c)
            flat[j] = keep - h
            down = loss_only(params, images, targets, c)
            flat[j] = keep
            fdflat[j] = (up - down) / (2 * h)
        err = float(np.max(np.abs(grads[name] - fd)) / max(np.max(np.abs(fd)), 1e-12))
        if err > worst:
            worst, worst_name = err, name
    return worst, worst <= tolerance, f"worst {worst:.2e} ({worst_name}, tolerance {tolerance:g})"


def timm_model(c, torch_dtype=None):
    """timm's VisionTransformer of spec F (import errors propagate)."""
    import functools
    import torch
    from timm.models.vision_transformer import VisionTransformer
    model = VisionTransformer(
        img_size=c["image"], patch_size=c["patch"], in_chans=c["channels"],
        num_classes=c["classes"], embed_dim=c["dim"], depth=c["depth"], num_heads=c["heads"],
        mlp_ratio=c["mlp"] / c["dim"], qkv_bias=True, global_pool="token", class_token=True,
        norm_layer=functools.partial(torch.nn.LayerNorm, eps=c["eps"]),
        act_layer=(functools.partial(torch.nn.GELU, approximate="tanh")
                   if c["gelu"] == "tanh" else torch.nn.GELU))
    if torch_dtype is not None:
        model = model.to(torch_dtype)
    return model


def load_into(model, params):
    import torch
    dtype = next(model.parameters()).dtype
    state = {n: torch.tensor(np.asarray(v), dtype=dtype) for n, v in params.items()}
    model.load_state_dict(state, strict=True)


def torch_check(c, seed, tolerance=1e-9):
    """Loss, logits and every gradient against torch autograd on timm's model
    (float64). -> (ok, line) or None when torch/timm do not import."""
    try:
        import torch
        import torch.nn.functional as F
        import timm  # noqa: F401
    except ImportError:
        return None
    params, images, targets = random_case(c, seed)
    loss, logits, grads = loss_and_grads(params, images, targets, c)
    model = timm_model(c, torch.float64)
    load_into(model, params)
    model.eval()  # no dropout anyway; eval for certainty
    tl = F.cross_entropy(model(torch.tensor(images)), torch.tensor(targets))
    tl.backward()
    tlogits = model(torch.tensor(images)).detach().numpy()
    worst, worst_name = abs(tl.item() - loss) / abs(loss), "loss"
    e = float(np.max(np.abs(tlogits - logits)) / np.max(np.abs(tlogits)))
    if e > worst:
        worst, worst_name = e, "logits"
    for name, param in model.named_parameters():
        g = param.grad.numpy()
        e = float(np.max(np.abs(grads[name] - g)) / max(np.max(np.abs(g)), 1e-300))
        if e > worst:
            worst, worst_name = e, name
    return worst <= tolerance, f"worst {worst:.2e} ({worst_name}, tolerance {tolerance:g})"


def self_test():
    tiny = {"depth": 2, "dim": 8, "heads": 2, "mlp": 12, "patch": 2, "image": 4,
            "channels": 2, "classes": 3, "eps": 1e-6}
    ok = True
    for gelu in ("none", "tanh"):
        c = dict(tiny, gelu=gelu)
        _, good, line = finite_difference_check(c, seed=7)
        print(f"{'ok  ' if good else 'FAIL'} finite differences, gelu={gelu}: {line}")
        ok &= good
        result = torch_check(c, seed=11)
        if result is None:
            print("skip torch autograd on timm's VisionTransformer: torch or timm does not "
                  "import")
        else:
            good, line = result
            print(f"{'ok  ' if good else 'FAIL'} torch autograd (timm VisionTransformer, "
                  f"float64), gelu={gelu}: {line}")
            ok &= good
    # examples/gen_vit.py --model's parameters: the same names, order and shapes.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
    import gen_vit
    c = dict(tiny, gelu="none")
    generated = [(n, tuple(s)) for n, s in gen_vit.model_params(
        c["depth"], c["dim"], c["mlp"], c["patch"], c["image"], c["channels"], c["classes"])]
    good = generated == list(param_shapes(c).items())
    print(f"{'ok  ' if good else 'FAIL'} gen_vit.py --model's parameters match the reference's "
          f"({len(generated)} names, order and shapes)")
    ok &= good
    # One-hot targets: the loss is the label's -log p.
    c = dict(tiny, gelu="none")
    params, images, _ = random_case(c, seed=3)
    labels = np.array([2, 0])
    onehot = np.eye(c["classes"])[labels]
    loss, logits, _ = loss_and_grads(params, images, onehot, c)
    z = logits - logits.max(axis=1, keepdims=True)
    manual = float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(2), labels]))
    good = abs(loss - manual) <= 1e-12 * abs(manual)
    print(f"{'ok  ' if good else 'FAIL'} one-hot loss = mean -log p[label]: "
          f"{loss:.12f} vs {manual:.12f}")
    ok &= good
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


# ---------------------------------------------------------------- CLI

def write_outputs(path, loss, logits, grads, float64):
    out = {"loss": np.array([loss]), "logits": logits}
    out.update({f"grad.{name}": g for name, g in grads.items()})
    if path.endswith(".safetensors"):
        if float64:
            raise ValueError("--float64 is for .npz outputs only")
        check_e2e.write_safetensors(path, {k: np.asarray(v, np.float32) for k, v in out.items()})
    else:
        dtype = np.float64 if float64 else np.float32
        np.savez(path, **{k: np.asarray(v, dtype) for k, v in out.items()})


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true", help="run the gradient checks")
    parser.add_argument("--config", help="model sizes: inline JSON or a JSON file")
    parser.add_argument("--params", help="weights: .safetensors or .npz with timm names")
    parser.add_argument("--images", help=".npy [batch, channels, image, image]")
    parser.add_argument("--targets", help=".npy [batch, classes] probabilities or [batch] labels")
    parser.add_argument("-o", "--output", help="loss, logits, gradients: .npz or .safetensors")
    parser.add_argument("--float64", action="store_true", help="write float64 (npz only)")
    parser.add_argument("--write-init", metavar="PATH",
                        help="write timm-like random weights (safetensors, F32) and exit")
    parser.add_argument("--seed", type=int, default=0, help="--write-init's seed (default 0)")
    a = parser.parse_args()
    if a.self_test:
        return self_test()
    if not a.config:
        parser.error("--config is required (or --self-test)")
    try:
        c = read_config(a.config)
        if a.write_init:
            check_e2e.write_safetensors(a.write_init, init_params(c, a.seed))
            return 0
        for flag in ("params", "images", "targets", "output"):
            if not getattr(a, flag):
                parser.error(f"--{flag.replace('_', '-')} is required")
        params = read_params(a.params)
        check_params(params, c)
        images = np.load(a.images)
        want = (c["channels"], c["image"], c["image"])
        if images.ndim != 4 or images.shape[1:] != want:
            raise ValueError(f"images: shape {list(images.shape)}, expected [batch, "
                             f"{', '.join(map(str, want))}]")
        targets = np.load(a.targets)
        batch = images.shape[0]
        if targets.ndim == 1 and np.issubdtype(targets.dtype, np.integer):
            if targets.shape[0] != batch or targets.min() < 0 or targets.max() >= c["classes"]:
                raise ValueError(f"labels: need {batch} in [0, {c['classes']})")
            targets = np.eye(c["classes"])[targets]
        elif targets.shape != (batch, c["classes"]):
            raise ValueError(f"targets: shape {list(targets.shape)}, expected "
                             f"[{batch}, {c['classes']}] or [{batch}] integer labels")
        loss, logits, grads = loss_and_grads(params, images, targets, c)
        write_outputs(a.output, loss, logits, grads, a.float64)
    except (ValueError, OSError, KeyError) as e:
        print(f"vit_train_ref.py: error: {e}", file=sys.stderr)
        return 1
    print(f"loss {loss:.9g}, {len(grads)} gradients -> {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

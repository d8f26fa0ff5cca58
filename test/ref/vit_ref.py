"""An independent NumPy (float64) reference of a stack of ViT blocks.

Written from the math of timm's `Block` (pre-norm), not from HTP's kernels:

    x = x + attn(norm1(x))
    x = x + fc2(gelu(fc1(norm2(x))))

attn: qkv = x @ Wqkv.T + bqkv, split into q | k | v (each [dim] wide, ordered
by head: head h owns columns h*hd .. (h+1)*hd), softmax(q k^T / sqrt(hd)) v
per head, heads concatenated back in order, then the output projection.
Layer norm uses the biased variance, as torch.nn.LayerNorm. GELU is exact
(0.5 x (1 + erf(x / sqrt 2))) or the tanh approximation.

Weights are a dict of timm names (blocks.{i}.norm1.weight, ...) to arrays.

`operand`, when given, is applied to both operands of every linear (x and
W of qkv, proj, fc1 and fc2; not to attention's q k^T and p v) before the
product: a matmul precision (htp-run --matmul-precision) rounds them so.
"""
import math

import numpy as np

PARAM_SUFFIXES = [
    "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
    "attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias",
    "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias",
]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf_float32(x):
    """math.erf rounded to float32: erf for a float32 run of vit_blocks
    (the plain _erf would widen the rest of the block to float64)."""
    return _erf(x).astype(np.float32)


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x, approximate, erf=_erf):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _same(value):
    return value


def attention(x, w_qkv, b_qkv, w_proj, b_proj, heads, operand=_same):
    batch, tokens, dim = x.shape
    head_dim = dim // heads
    qkv = operand(x) @ operand(w_qkv).T + b_qkv                # [B, N, 3*dim]
    # [B, N, 3, heads, hd] -> [3, B, heads, N, hd]
    qkv = qkv.reshape(batch, tokens, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim)  # [B, heads, N, N]
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, tokens, dim)
    return operand(out) @ operand(w_proj).T + b_proj


def vit_blocks(x, weights, depth, heads, eps=1e-6, gelu_approximate="none",
               dtype=np.float64, erf=_erf, operand=None):
    """Runs `depth` blocks on x [batch, tokens, dim] in `dtype` (float64 for
    checking; bench/ times it in float32 with a vectorised erf); `operand`
    as the module's docstring says."""
    op = operand or _same
    x = np.asarray(x, dtype=dtype)
    w = {name: np.asarray(value, dtype=dtype) for name, value in weights.items()}
    for i in range(depth):
        p = lambda suffix: w[f"blocks.{i}.{suffix}"]
        h = layer_norm(x, p("norm1.weight"), p("norm1.bias"), eps)
        x = x + attention(h, p("attn.qkv.weight"), p("attn.qkv.bias"),
                          p("attn.proj.weight"), p("attn.proj.bias"), heads, op)
        h = layer_norm(x, p("norm2.weight"), p("norm2.bias"), eps)
        h = gelu(op(h) @ op(p("mlp.fc1.weight")).T + p("mlp.fc1.bias"), gelu_approximate, erf)
        x = x + (op(h) @ op(p("mlp.fc2.weight")).T + p("mlp.fc2.bias"))
    return x

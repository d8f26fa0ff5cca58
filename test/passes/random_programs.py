#!/usr/bin/env python3
"""Seeded, time-bounded random-program property test of the htp compiler.

Writes random htp programs: ViT-like blocks of random shapes (dims <= 64,
tokens <= 9, batch <= 3, depth 1 to 3, f32 and bf16, with and without
biases, fused and unfused GELU, residuals in either operand order or of a
value computed late, extra replicated adds, layer norms, linears, bias adds
and GELUs, weights tied across layers or passed as plain inputs, odd legal
parameter names, several results, a second public function, MLP-only rank-2
programs, classifiers with a cross-entropy loss, upstream shard annotations)
and deliberately malformed ones (wrong shapes, heads that do not divide,
parameters used twice, ops in nested regions, a function another calls or
an external one, odd attribute values and names, mixed element types,
unranked / dynamic / 0-d tensors, hand-written split ops, bad shard
annotations, bad losses, random text edits and deep nesting).

PROPERTY, for every htp-opt invocation (plain verification; the split at tp
1 to 4 and odd tps, with and without shares / spare / mlp-unit-width; the
balance hooks; both fusions; the gradient; export / import of shard
annotations; the workspace and the lowering; the whole --htp-pipeline with
its options): it succeeds (exit 0) or fails cleanly (exit 1 with a line
holding "error:"); it never crashes (a signal, another exit code, "LLVM
ERROR", an assertion, a stack dump, a sanitizer report) and never hangs
(--timeout per invocation). Also: a successful pass's output parses again;
what --htp-export-shard writes, --htp-import-shard takes; annotations that
state the even split import as --htp-tensor-parallel splits the plain
function; a program meant to be valid verifies.

NUMERICS, for valid f32 programs while the time allows: htp-run (the JIT,
or htp-compile's .so) runs the block at tp 1 and at a tp it allows (with
shares, spare room, or a straggler under --policy migrate at times) on
random inputs and weights passed as .npy and safetensors, and every result
is compared with a float64 NumPy reference of the same math (test/ref/
vit_ref.py's layer norm and GELU; the attention here, in timm's layout with
any head width): max |y - ref| / max |ref| <= 1e-4 (or 8 times float32's
own error on it, as test/ref/check_e2e.py allows), and tp N with tp 1. For
a loss, @NAME_grad's gradients at tp 1 are held to a central finite
difference of the reference along a random direction, and rank 0's
gradients at tp N to their part of tp 1's. Valid bf16 and malformed
programs run through htp-run for crashes only (bf16 with --check).

Deterministic for a given --seed: program K of seed S is always the same
(--only K reruns it, --print shows it); --seconds bounds how many programs
run. On a failure the seed, program number, program text (saved under a
temporary folder whose path is printed), command and tool output are
printed, and the exit status is 1. The last lines are a summary and PASS or
FAIL.

    random_programs.py --htp-opt build/tools/htp-opt/htp-opt \\
        --htp-run build/tools/htp-run/htp-run \\
        --htp-compile build/tools/htp-compile/htp-compile --seconds 45 --seed 1
    random_programs.py ... --seconds 600 --seed 7 --keep-going   # a longer hunt
    random_programs.py ... --seed 7 --only 123 --verbose         # one program again
"""
import argparse
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import check_e2e  # noqa: E402  (write_safetensors)
import vit_ref  # noqa: E402  (layer_norm, gelu, erf_float32)

CRASH_MARKERS = ("LLVM ERROR", "Assertion", "Stack dump", "PLEASE submit a bug report",
                 "AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer",
                 "runtime error:", "Segmentation fault", "core dumped", "terminate called",
                 "UNREACHABLE executed")

TOL = 1e-4


# ---------------------------------------------------------------------------
# A tiny program builder: values with shapes, ops with their text and math.
# ---------------------------------------------------------------------------

class Value:
    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, list(shape), dtype

    def type(self):
        if self.shape is None:
            return f"tensor<*x{self.dtype}>"
        return "tensor<" + "".join(f"{s}x" for s in self.shape) + f"{self.dtype}>"


class Arg(Value):
    def __init__(self, name, shape, dtype, kind, label):
        super().__init__(name, shape, dtype)
        self.kind, self.label = kind, label  # kind: input | param; label: its htp name
        self.weight = kind == "param"  # drawn as a weight (even when passed as an input)
        self.targets = False  # class probabilities (a loss's targets)
        self.extra_attrs = []


class Op:
    """One op: fmt(types) renders it (types: a function of a Value), fn
    evaluates it on arrays (None: no reference)."""

    def __init__(self, result, fmt, fn, operands, kind):
        self.result, self.fmt, self.fn, self.operands, self.kind = result, fmt, fn, operands, kind
        self.nested = False


class Program:
    def __init__(self, rng, dtype, name="block"):
        self.rng, self.dtype, self.name = rng, dtype, name
        self.args, self.ops, self.results = [], [], []
        self.counter = 0
        self.heads, self.hidden = [], []  # every attention's heads, every MLP's hidden width
        self.evaluable = True
        self.result_attrs = True
        self.func_attrs = ""
        self.extra_funcs = []  # text of further functions
        self.caller = None
        self.pairs = []  # (fc1 op, fc2 op) of each MLP
        self.loss = False  # result 0 a cross-entropy loss: --htp-grad writes @NAME_grad
        self.duplicate = False  # a copy of the function as @twin
        self.grid = None  # shard annotations: the grid's line,
        self.shardings = []  # the shard.sharding lines,
        self.annotated = {}  # arg name -> (sharding name, annotate_for_users)
        self.even_annotations = False  # annotations that state exactly the even split

    def fresh(self, stem):
        self.counter += 1
        return f"%{stem}{self.counter}"

    def arg(self, stem, shape, kind="param", label=None):
        name = self.fresh(stem)
        if label is None:
            label = f"p{self.counter}.{stem}" if kind == "param" else f"in{self.counter}"
        a = Arg(name, shape, self.dtype, kind, label)
        self.args.append(a)
        return a

    def op(self, stem, shape, fmt, fn, operands, kind):
        v = Value(self.fresh(stem), shape, self.dtype)
        self.ops.append(Op(v, fmt, fn, operands, kind))
        return v

    # -- the htp ops ------------------------------------------------------
    def layer_norm(self, x, g=None, b=None, eps=1e-6):
        g = g or self.arg("ln_w", [x.shape[-1]])
        b = b or self.arg("ln_b", [x.shape[-1]])
        eps = float(np.float32(eps))
        e = repr(eps) if eps != 0 else "0.0"
        if "e" not in e and "." not in e:
            e += ".0"

        def fmt(T, r, eps_text=e):
            return (f"{r.name} = htp.layer_norm {x.name}, {g.name}, {b.name} "
                    f"{{epsilon = {eps_text} : f32}} : ({T(x)}, {T(g)}, {T(b)}) -> {T(r)}")
        return self.op("ln", x.shape, fmt,
                       lambda env, dt: vit_ref.layer_norm(env[x.name], env[g.name], env[b.name],
                                                          dt(eps)),
                       [x, g, b], "layer_norm")

    def linear(self, x, out, bias=True, gelu=None, residual=None, w=None, b=None):
        w = w or self.arg("w", [out, x.shape[-1]])
        if bias:
            b = b or self.arg("b", [out])
        else:
            b = None
        ops = [x, w] + ([b] if b else []) + ([residual] if residual else [])

        def fmt(T, r):
            text = f"{r.name} = htp.linear {x.name}, {w.name}"
            if b:
                text += f", {b.name}"
            if gelu:
                text += f" gelu {gelu}"
            if residual:
                text += f" residual {residual.name}"
            return text + " : (" + ", ".join(T(o) for o in ops) + f") -> {T(r)}"

        def fn(env, dt):
            y = env[x.name] @ env[w.name].T
            if b:
                y = y + env[b.name]
            if gelu:
                y = _gelu(y, gelu, dt)
            if residual:
                y = y + env[residual.name]
            return y
        return self.op("lin", x.shape[:-1] + [out], fmt, fn, ops, "linear")

    def attention(self, x, heads, head_dim, proj_bias=True, residual=None, attrs=None,
                  wqkv=None, bqkv=None, wproj=None, bproj=None):
        d = x.shape[-1]
        inner = heads * head_dim
        wqkv = wqkv or self.arg("wqkv", [3 * inner, d])
        bqkv = bqkv or self.arg("bqkv", [3 * inner])
        wproj = wproj or self.arg("wproj", [d, inner])
        if proj_bias:
            bproj = bproj or self.arg("bproj", [d])
        else:
            bproj = None
        ops = [x, wqkv, bqkv, wproj] + ([bproj] if bproj else []) + ([residual] if residual else [])
        attr_text = attrs if attrs is not None else f"num_heads = {heads} : i64"
        self.heads.append(heads)

        def fmt(T, r):
            text = f"{r.name} = htp.attention " + ", ".join(o.name for o in ops[:5 if bproj else 4])
            if residual:
                text += f" residual {residual.name}"
            return text + f" {{{attr_text}}} : (" + ", ".join(T(o) for o in ops) + f") -> {T(r)}"

        def fn(env, dt):
            y = _attention(env[x.name], env[wqkv.name], env[bqkv.name], env[wproj.name],
                           env[bproj.name] if bproj else None, heads)
            if residual:
                y = y + env[residual.name]
            return y
        return self.op("attn", x.shape, fmt, fn, ops, "attention")

    def gelu(self, x, approx):
        def fmt(T, r):
            return f"{r.name} = htp.gelu {x.name} approximate {approx} : {T(r)}"
        return self.op("gelu", x.shape, fmt, lambda env, dt: _gelu(env[x.name], approx, dt),
                       [x], "gelu")

    def add(self, a, b):
        def fmt(T, r):
            return f"{r.name} = htp.add {a.name}, {b.name} : {T(r)}"
        return self.op("add", a.shape, fmt, lambda env, dt: env[a.name] + env[b.name], [a, b],
                       "add")

    def bias_add(self, x, b=None):
        b = b or self.arg("ba", [x.shape[-1]])

        def fmt(T, r):
            return f"{r.name} = htp.bias_add {x.name}, {b.name} : {T(x)}, {T(b)}"
        return self.op("bias", x.shape, fmt, lambda env, dt: env[x.name] + env[b.name], [x, b],
                       "bias_add")

    def cls_token(self, x):
        def fmt(T, r):
            return f"{r.name} = htp.cls_token {x.name} : ({T(x)}) -> {T(r)}"
        return self.op("cls", [x.shape[0], x.shape[-1]], fmt, lambda env, dt: env[x.name][:, 0, :],
                       [x], "cls_token")

    def cross_entropy(self, logits, t):
        def fmt(T, r):
            return (f"{r.name} = htp.cross_entropy {logits.name}, {t.name} : "
                    f"({T(logits)}, {T(t)}) -> {T(r)}")

        def fn(env, dt):
            z = env[logits.name]
            z = z - z.max(axis=-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
            return np.array([-(env[t.name] * logp).sum(axis=-1).mean()])
        return self.op("ce", [1], fmt, fn, [logits, t], "cross_entropy")

    def raw(self, stem, shape, text_fn, operands, kind="raw"):
        """An op written as text (no reference): text_fn(T, r)."""
        self.evaluable = False
        return self.op(stem, shape, text_fn, None, operands, kind)

    # -- rendering and evaluation -----------------------------------------
    def render(self):
        T = Value.type
        lines = []
        args = []
        for a in self.args:
            attrs = list(a.extra_attrs)
            if a.label is not None:
                key = "htp.param" if a.kind == "param" else "htp.input"
                attrs.insert(0, f"{key} = {mlir_string(a.label)}")
            args.append(f"{a.name}: {T(a)}" + (" {" + ", ".join(attrs) + "}" if attrs else ""))
        results = []
        for i, r in enumerate(self.results):
            results.append(T(r) + (f" {{htp.result = \"y{i}\"}}" if self.result_attrs else ""))
        lines.append(f"func.func {self.name}(" + ",\n    ".join(args) + ") -> ("
                     + ", ".join(results) + ")" + (f" attributes {{{self.func_attrs}}}"
                                                   if self.func_attrs else "") + " {")
        used = {sharding for sharding, _ in self.annotated.values()}
        for line in self.shardings:  # those the annotations use (an unused one would stay)
            if line.split(" = ", 1)[0] in used:
                lines.append("  " + line)
        for name, (sharding, users) in self.annotated.items():
            arg = next(a for a in self.args if a.name == name)
            lines.append(f"  {name}_sh = shard.shard {name} to {sharding}"
                         + (" annotate_for_users" if users else "") + f" : {T(arg)}")
        for op in self.ops:
            text = op.fmt(T, op.result)
            if self.annotated:
                head, eq, tail = text.partition(" = ")
                tail = re.sub(r"(%[A-Za-z_]+\d+)(?![\w])",
                              lambda m: m.group(1) + "_sh" if m.group(1) in self.annotated
                              else m.group(1), tail)
                text = head + eq + tail
            if op.nested:
                lines.append(f"  {op.result.name} = scf.execute_region -> {T(op.result)} {{")
                inner = text.replace(op.result.name + " =", op.result.name + "_in =", 1)
                lines.append("    " + inner)
                lines.append(f"    scf.yield {op.result.name}_in : {T(op.result)}")
                lines.append("  }")
            else:
                lines.append("  " + text)
        lines.append("  return " + ", ".join(r.name for r in self.results) + " : "
                     + ", ".join(T(r) for r in self.results))
        lines.append("}")
        text = "\n".join(lines) + "\n"
        if self.grid:
            text = self.grid + "\n" + text
        if self.duplicate:
            text += text.replace(f"func.func {self.name}(", "func.func @twin(", 1)
        if self.caller:
            text += self.caller
        for f in self.extra_funcs:
            text += f
        return text

    def evaluate(self, feeds, dtype=np.float64):
        """feeds: arg name -> array; returns the results."""
        dt = dtype
        env = {k: np.asarray(v, dtype=dt) for k, v in feeds.items()}

        def cast(value):
            return dt(value)
        for op in self.ops:
            env[op.result.name] = np.asarray(op.fn(env, cast), dtype=dt)
        return [env[r.name] for r in self.results]


def mlir_string(text):
    out = ['"']
    for ch in text.encode("utf-8"):
        c = chr(ch)
        if c in '"\\' or ch < 0x20 or ch >= 0x7f:
            out.append("\\%02X" % ch)
        else:
            out.append(c)
    return "".join(out) + '"'


def _gelu(x, approx, dt):
    if dt is np.float32 or (hasattr(x, "dtype") and x.dtype == np.float32):
        return vit_ref.gelu(x, approx, erf=vit_ref.erf_float32).astype(x.dtype)
    return vit_ref.gelu(x, approx)


def _attention(x, w_qkv, b_qkv, w_proj, b_proj, heads):
    """timm's attention with any head width (vit_ref.attention takes
    head_dim = dim / heads only)."""
    *lead, tokens, dim = x.shape
    inner = w_qkv.shape[0] // 3
    hd = inner // heads
    qkv = x @ w_qkv.T + b_qkv
    qkv = qkv.reshape(*lead, tokens, 3, heads, hd)
    qkv = np.moveaxis(qkv, (-3, -2), (0, -3))  # [3, ..., heads, tokens, hd]
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = q @ np.swapaxes(k, -1, -2) / x.dtype.type(math.sqrt(hd))
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=-1, keepdims=True)
    out = np.moveaxis(p @ v, -3, -2).reshape(*lead, tokens, inner)
    y = out @ w_proj.T
    if b_proj is not None:
        y = y + b_proj
    return y


# ---------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------

MALFORMED = ["shape", "heads", "param_twice", "nested", "called", "attr", "name", "dtype",
             "handwritten", "text", "types", "loss_bad", "shard"]


def divisors_pick(rng, n):
    return rng.choice([d for d in range(1, n + 1) if n % d == 0])


def gen_program(rng):
    """Returns (Program, kind). kind: 'valid' or a MALFORMED name."""
    dtype = "bf16" if rng.random() < 0.25 else "f32"
    kind = "valid" if rng.random() < 0.5 else rng.choice(MALFORMED)
    loss = kind == "loss_bad" or (kind == "valid" and rng.random() < 0.15)
    if loss and kind == "loss_bad" and rng.random() < 0.5:
        return gen_loss(rng, kind), kind
    if loss:
        dtype = "f32"  # the training ops are f32 only
    p = Program(rng, dtype, name=rng.choice(["@loss", "@vit_loss"] if loss else
                                            ["@block", "@vit_block", "@f", "@main"]))
    notes = []
    batch = rng.randint(1, 3)
    tokens = rng.randint(1, 9)
    # A regular program (every layer one attention and one MLP pair of the
    # same shapes, a GELU between the pair's linears) is what the balance
    # hooks, and so htp-run at tp > 1, take.
    regular = kind == "valid" and rng.random() < 0.5
    mlp_only = not regular and not loss and rng.random() < 0.12
    # Widths: dim a multiple of a head count; tp-friendly most of the time.
    heads = rng.choice([1, 2, 3, 4, 6, 8])
    if rng.random() < 0.8:
        head_dim = rng.randint(1, max(1, 64 // heads))
        dim = heads * head_dim
        inner_hd = head_dim
    else:  # attention inner width differs from dim
        dim = rng.randint(1, 64)
        inner_hd = rng.randint(1, 8)
    mlp = rng.choice([dim, 2 * dim, 4 * dim, rng.randint(1, 64), 12, 24, 48])
    mlp = max(1, min(mlp, 256))
    shape = [tokens, dim] if (mlp_only and rng.random() < 0.5) else [batch, tokens, dim]
    x = p.arg("x", shape, kind="input", label=rng.choice(["x", "x", "input", None]))
    depth = rng.randint(1, 3)
    # weights tied across layers: valid (each layer splits them alike) or,
    # with more uses below, not
    share_blocks = kind in ("param_twice", "valid") and rng.random() < (
        0.5 if kind == "param_twice" else 0.1)
    first_params = {}
    eps = rng.choice([1e-6, 1e-5, 1e-3, 0.1])
    outs = []
    second_input = None
    layer_choice = {}
    for i in range(depth):
        blk_params = first_params if (share_blocks and i > 0) else None
        # attention half
        if not mlp_only:
            n1 = p.layer_norm(x, eps=eps) if rng.random() < 0.9 else x
            pb = rng.random() < 0.8
            if regular:
                pb = layer_choice.setdefault("pb", pb)
            if blk_params:
                a = p.attention(n1, heads, inner_hd, proj_bias=pb, **blk_params["attn"])
            else:
                a = p.attention(n1, heads, inner_hd, proj_bias=pb)
                if i == 0:
                    first_params["attn"] = dict(zip(["wqkv", "bqkv", "wproj", "bproj"],
                                                    [o for o in p.ops[-1].operands[1:5]]))
                    if not pb:
                        first_params["attn"]["bproj"] = None
            x = residual(p, rng, x, a)
            if rng.random() < 0.15:
                x = extra(p, rng, x, notes, regular)
        # MLP half
        if rng.random() < 0.08:  # norm weights computed (after the attention's all-reduce)
            g = p.add(p.arg("ga", [dim]), p.arg("gb", [dim]))
            n2 = p.layer_norm(x, g=g, eps=eps)
        else:
            n2 = p.layer_norm(x, eps=eps) if rng.random() < 0.9 else x
        b1, b2 = rng.random() < 0.8, rng.random() < 0.8
        approx = rng.choice(["none", "tanh"])
        style = rng.random()
        if regular:
            b1, b2, approx = layer_choice.setdefault("mlp", (b1, b2, approx))
            style = layer_choice.setdefault("style", 0.2 + 0.6 * rng.random())
        hidden = mlp
        if blk_params and "fc1" in blk_params:
            w1, bb1, w2, bb2 = blk_params["fc1"]
        else:
            w1 = bb1 = w2 = bb2 = None
        if style < 0.2:  # fused GELU written so
            h1 = p.linear(n2, hidden, bias=b1 or bb1 is not None, gelu=approx, w=w1, b=bb1)
        else:
            h1 = p.linear(n2, hidden, bias=b1 or bb1 is not None, w=w1, b=bb1)
            if style < 0.85:
                h1 = p.gelu(h1, approx)
            elif style < 0.93:
                h1 = p.gelu(p.gelu(h1, approx), rng.choice(["none", "tanh"]))
            # else: no GELU between the two linears
        fc1 = [o for o in p.ops if o.kind == "linear"][-1]
        p.hidden.append(hidden)
        fc2out = dim
        y = p.linear(h1, fc2out, bias=b2 or bb2 is not None, w=w2, b=bb2)
        fc2 = p.ops[-1]
        p.pairs.append((fc1, fc2))
        if i == 0:
            first_params["fc1"] = (fc1.operands[1], fc1.operands[2] if len(fc1.operands) > 2 else None,
                                   fc2.operands[1], fc2.operands[2] if len(fc2.operands) > 2 else None)
        x = residual(p, rng, x, y)
        if rng.random() < 0.25:
            x = extra(p, rng, x, notes, regular)
        outs.append(x)
    # results
    results = [x]
    r = rng.random()
    if loss:
        # a classifier's head and its mean cross-entropy (--htp-grad's input)
        r = 1.0
        classes = rng.randint(1, 10)
        t = p.arg("t", [batch, classes], kind="input", label="targets")
        t.targets = True
        logits = p.linear(p.cls_token(x), classes, bias=rng.random() < 0.8)
        lossv = p.cross_entropy(logits, t)
        results = [lossv] + ([logits] if rng.random() < 0.5 else [])
        p.loss = True
        if kind == "loss_bad":
            what = rng.random()
            if what < 0.3:
                t.kind, t.label = "param", "targets"  # targets marked a parameter
            elif what < 0.5:
                results = results[::-1] if len(results) > 1 else [logits, lossv]
            elif what < 0.7:
                results = [lossv, p.cross_entropy(logits, t)]  # a second loss
            elif what < 0.85:
                p.name = "@vit"  # and an existing @vit_grad
                p.extra_funcs.append("func.func @vit_grad() {\n  return\n}\n")
            else:
                logits.shape = [batch + 1, classes]
    if r < 0.08:
        results.append(outs[0] if outs[0] is not x else p.ops[0].result)
    elif r < 0.12:
        results.append(x)  # the same value twice
    elif r < 0.15:
        results.append(p.args[0])  # an argument returned
    elif r < 0.2:
        head = p.linear(x, rng.randint(1, 16), bias=rng.random() < 0.5)
        results = [head]
    if rng.random() < 0.1 and second_input is None and not loss:
        # a second data input added to the result
        second_input = p.arg("r", results[0].shape, kind="input", label="r2")
        results[0] = p.add(results[0], second_input)
    p.results = results
    p.result_attrs = rng.random() < 0.7
    if kind == "valid" and not loss and rng.random() < 0.08:
        p.duplicate = True  # a second public function, the same block (htp-run --entry)
    if kind == "valid" and rng.random() < 0.15:
        # odd but legal parameter names (escaped in the signature's JSON,
        # matched against the safetensors header)
        odd = ["blocks.0 weight", 'q"uote', "back\\slash", "\u00fc\u540d", "a/b:c{d}[e]",
               "x" * rng.choice([200, 4000]), "%arg0", "htp.entry.f", "\u2028sep", "'single'"]
        for a in p.args:
            if a.kind == "param" and rng.random() < 0.3:
                a.label = rng.choice(odd) + f"#{a.name[1:]}"
    if rng.random() < 0.15:
        # weights without htp.param: data inputs (htp-run --input, at their
        # global shapes, sliced per rank like parameters)
        for a in p.args:
            if a.kind == "param" and rng.random() < 0.5:
                a.kind, a.label = "input", None
    if kind == "shard" and not regular:
        annotate(p, rng, heads)
    elif kind != "valid":
        corrupt(p, rng, kind, notes)
    return p, kind


def annotate(p, rng, heads):
    """Upstream shard annotations of the weights (--htp-import-shard): the
    even split's exactly, or random ones."""
    n = rng.choice([1, 2, 3, 4]) if rng.random() < 0.9 else rng.choice([0, 5, 8, 1025])
    p.grid = f"shard.grid @g(shape = {n})"
    if rng.random() < 0.05:
        p.grid = rng.choice(["shard.grid @g(shape = 2x2)", "shard.grid @g(shape = ?)",
                             f"shard.grid @h(shape = {n})"])
    p.shardings = ["%sh_rows = shard.sharding @g split_axes = [[0]] : !shard.sharding",
                   "%sh_cols = shard.sharding @g split_axes = [[], [0]] : !shard.sharding",
                   "%sh_whole = shard.sharding @g split_axes = [[]] : !shard.sharding"]
    want, qkv = {}, set()
    for o in p.ops:
        if o.kind == "attention":
            want[o.operands[3].name] = "%sh_cols"
            qkv |= {o.operands[1].name, o.operands[2].name}  # never annotated (strided)
    for fc1, fc2 in p.pairs:
        want[fc1.operands[1].name] = "%sh_rows"
        if len(fc1.operands) > 2 and fc1.operands[2].shape and len(fc1.operands[2].shape) == 1:
            want[fc1.operands[2].name] = "%sh_rows"
        want[fc2.operands[1].name] = "%sh_cols"
    even = rng.random() < 0.7 and n >= 1 and all(h % n == 0 for h in p.heads) and all(
        m % n == 0 for m in p.hidden) and p.grid == f"shard.grid @g(shape = {n})"
    if even:
        p.even_annotations = True
        for name, sh in want.items():
            if rng.random() < 0.8:
                p.annotated[name] = (sh, True)
        for a in p.args:
            if a.name not in want and a.name not in qkv and rng.random() < 0.2:
                p.annotated[a.name] = ("%sh_whole", True)
        if not p.annotated:
            p.even_annotations = False
        return
    # random: wrong dims, offsets, computed values, annotations on qkv
    k = 0
    for a in p.args:
        if rng.random() < 0.2 and a.shape:
            choice = rng.random()
            if choice < 0.6:
                sh = rng.choice(["%sh_rows", "%sh_cols", "%sh_whole"])
            else:
                k += 1
                size = a.shape[0]
                cuts = sorted(rng.randint(0, size) for _ in range(max(0, n - 1)))
                if rng.random() < 0.2:
                    cuts = [rng.randint(-1, size + 2) for _ in range(rng.randint(0, n + 1))]
                offs = ", ".join(str(c) for c in [0] + cuts + [size])
                spec = (f"sharded_dims_offsets = [{offs}]" if rng.random() < 0.9
                        else "halo_sizes = [1, 1]")
                p.shardings.append(f"%sh_o{k} = shard.sharding @g split_axes = [[0]] {spec} "
                                   ": !shard.sharding")
                sh = f"%sh_o{k}"
            p.annotated[a.name] = (sh, rng.random() < 0.85)


def residual(p, rng, x, y):
    """The residual add of a branch y onto the stream x, in either operand
    order, or of a value computed after the branch (so after a split
    layer's all-reduce), or of y onto itself, or none."""
    r = rng.random()
    if r < 0.4:
        return p.add(x, y)
    if r < 0.8:
        return p.add(y, x)
    if r < 0.88:
        late = rng.choice([lambda: p.gelu(x, "tanh"), lambda: p.add(x, x),
                           lambda: p.layer_norm(x), lambda: p.bias_add(x)])()
        return p.add(y, late) if rng.random() < 0.5 else p.add(late, y)
    if r < 0.94:
        return p.add(y, y)
    return y


def extra(p, rng, x, notes, regular=False):
    """An extra replicated op (or two) on the residual stream."""
    r = rng.random() * (0.85 if regular else 1.0)
    if r < 0.2:
        return p.add(x, x)
    if r < 0.4:
        return p.layer_norm(x, eps=rng.choice([1e-6, 1e-2, 1.0]))
    if r < 0.6:  # a linear outside an MLP pair, read by an add
        lin = p.linear(x, x.shape[-1], bias=rng.random() < 0.5)
        return p.add(lin, x) if rng.random() < 0.5 else p.add(x, lin)
    if r < 0.75:
        return p.bias_add(x)
    if r < 0.85:
        return p.gelu(x, rng.choice(["none", "tanh"]))
    # a linear chain: a square linear straight into another pair
    notes.append("linear chain")
    lin = p.linear(x, x.shape[-1], bias=rng.random() < 0.5)
    first = p.ops[-1]
    g = p.gelu(lin, "tanh")
    y = p.linear(g, x.shape[-1], bias=rng.random() < 0.5)
    p.pairs.append((first, p.ops[-1]))
    p.hidden.append(x.shape[-1])
    return y


def gen_loss(rng, kind):
    """A classifier with a cross-entropy loss (f32, for --htp-grad)."""
    p = Program(rng, "f32", name=rng.choice(["@loss", "@vit_loss"]))
    batch, tokens, dim = rng.randint(1, 3), rng.randint(1, 9), rng.choice([4, 8, 12, 16])
    heads = rng.choice([d for d in (1, 2, 4) if dim % d == 0])
    classes = rng.randint(2, 10)
    x = p.arg("x", [batch, tokens, dim], kind="input", label="x")
    t = p.arg("t", [batch, classes], kind="input", label="targets")
    n = p.layer_norm(x)
    a = p.attention(n, heads, dim // heads)
    h = p.add(x, a)
    n2 = p.layer_norm(h)
    m = p.gelu(p.linear(n2, 2 * dim), rng.choice(["none", "tanh"]))
    p.hidden.append(2 * dim)
    h = p.add(h, p.linear(m, dim))

    def cls(T, r):
        return f"{r.name} = htp.cls_token {h.name} : ({T(h)}) -> {T(r)}"
    c = p.raw("cls", [batch, dim], cls, [h], "cls_token")
    logits = p.linear(c, classes)
    if kind == "loss_bad":
        t.shape = [batch, classes + rng.choice([-1, 1])] if rng.random() < 0.5 else t.shape
        if rng.random() < 0.5:
            t.kind = "param"  # targets marked a parameter
    lt = [1] if kind != "loss_bad" or rng.random() < 0.7 else [2]

    def ce(T, r):
        return (f"{r.name} = htp.cross_entropy {logits.name}, {t.name} : "
                f"({T(logits)}, {T(t)}) -> {T(r)}")
    loss = p.raw("loss", lt, ce, [logits, t], "cross_entropy")
    p.results = [loss, logits] if rng.random() < 0.6 else [loss]
    if kind == "loss_bad" and rng.random() < 0.3:
        p.results = [logits, loss]
    return p


def corrupt(p, rng, kind, notes):
    p.evaluable = False
    values = p.args + [o.result for o in p.ops]
    if kind == "shape":
        v = rng.choice(values)
        i = rng.randrange(len(v.shape)) if v.shape else 0
        how = rng.random()
        if how < 0.5 and v.shape:
            v.shape[i] = max(1, v.shape[i] + rng.choice([-1, 1, 2, 3]))
        elif how < 0.6 and v.shape:
            v.shape[i] = rng.choice([0, 2**31 - 1, 2**31, 2**40, 2**62])
        elif how < 0.75:
            v.shape = v.shape[:-1] if len(v.shape) > 1 else v.shape + [1]
        elif how < 0.85:
            v.shape = [rng.randint(1, 3)] + v.shape
        else:
            v.shape = [rng.randint(1, 3)] * rng.choice([0, 4, 5, 9])
        notes.append(f"shape of {v.name} -> {v.shape}")
    elif kind == "heads":
        attn = [o for o in p.ops if o.kind == "attention"]
        if not attn:
            return corrupt(p, rng, "attr", notes)
        o = rng.choice(attn)
        h = rng.choice([0, -1, -4, 5, 7, 9, 64, 2**20 + 1, 2**31, 2**40, 2**63 - 1,
                        "2 : i32", "3.0 : f32", "\"4\""])
        set_attr(o, "num_heads", h if isinstance(h, str) else f"{h} : i64")
    elif kind == "param_twice":
        params = [a for a in p.args if a.kind == "param"]
        targets = [o for o in p.ops if o.kind in ("linear", "layer_norm", "bias_add")]
        if not params or not targets:
            return
        o = rng.choice(targets)
        same = [a for a in params if a.shape == o.operands[1].shape and a is not o.operands[1]]
        if same:
            new = rng.choice(same)
            replace_operand(o, o.operands[1], new)
            notes.append(f"{o.result.name} reads {new.name}")
        # and one parameter name given to two arguments
        if rng.random() < 0.5 and len(params) > 1:
            a, b = rng.sample(params, 2)
            b.label = a.label
    elif kind == "nested":
        o = rng.choice(p.ops)
        o.nested = True
    elif kind == "called":
        sig = ", ".join(f"{a.name}: {a.type()}" for a in p.args)
        res = ", ".join(r.type() for r in p.results)
        call = ", ".join(a.name for a in p.args)
        callee = p.name
        which = rng.random()
        if which < 0.3:
            callee = "@nowhere"
        p.caller = (f"func.func {'private ' if rng.random() < 0.3 else ''}@caller({sig}) -> ({res}) {{\n"
                    f"  %r:{len(p.results)} = func.call {callee}({call}) : "
                    f"({', '.join(a.type() for a in p.args)}) -> ({res})\n"
                    f"  return " + ", ".join(f"%r#{i}" for i in range(len(p.results)))
                    + f" : {res}\n}}\n")
        if 0.3 <= which < 0.5:  # and an external function beside them, called or not
            p.extra_funcs.append(f"func.func private @ext({', '.join(a.type() for a in p.args)})"
                                 f" -> ({res})\n")
            if which < 0.4:
                p.caller = p.caller.replace(f"func.call {callee}(", "func.call @ext(")
    elif kind == "attr":
        lns = [o for o in p.ops if o.kind == "layer_norm"]
        pick = rng.random()
        if lns and pick < 0.6:
            o = rng.choice(lns)
            eps = rng.choice(["0.0 : f32", "-1.0e-05 : f32", "3.0e+38 : f32", "1.0e+39 : f32",
                              "1.0e-45 : f32", "0x7FC00000 : f32", "0x7F800000 : f32",
                              "0xFF800000 : f32", "1 : i64", "1.0e-05 : f64", "\"eps\"",
                              "1.0e-05 : bf16", "-0.0 : f32"])
            set_attr(o, "epsilon", eps)
        elif pick < 0.8:
            o = rng.choice(p.ops)
            set_attr(o, rng.choice(["pair", "group", "unit_width", "htp.workspace_offsets",
                                    "htp.scratch_offset", "gelu"]),
                     rng.choice(["-1 : i64", "0 : i64", "131072 : i64", "\"\"", "\"tp\"",
                                 "array<i64: -5>", "array<i64: 0, 0, 0>", "9223372036854775807 : i64"]))
        else:
            p.func_attrs = rng.choice(["htp.tp = 2 : i64", "htp.tp = 0 : i64", "htp.tp = -3 : i64",
                                       "htp.workspace_bytes = 0 : i64", "htp.backward",
                                       "htp.tp = 1025 : i64"])
            if rng.random() < 0.5:
                a = rng.choice(p.args)
                a.extra_attrs.append(rng.choice([
                    "htp.shard = #htp.shard<dim = 0, parts = 2, layout = blocks>",
                    "htp.shard = #htp.shard<dim = 5, parts = 2, layout = qkv>",
                    "htp.shard = #htp.shard<dim = 0, parts = 0, layout = blocks>",
                    "htp.shard = #htp.shard<dim = 1, parts = 3, layout = blocks>",
                    "htp.grad_of = \"x\""]))
    elif kind == "name":
        what = rng.random()
        odd = rng.choice(["", "a\"b", "a\\b", "line\nbreak", "tab\there", "x" * 5000,
                          "ü名", "\x7f", "htp.entry.x", "a b", "blocks.0.attn.qkv.weight"])
        if what < 0.4:
            p.name = rng.choice(['@"with space"', '@"quote\\"d"', "@memcpy", "@htp_cpu_linear_f32",
                                 '@"htp.entry.block"', "@" + "f" * 5000, '@"ü"', '@""', "@htp_rt_mlp_f32",
                                 "@htp.sig.block", '@"a\\0Ab"', "@malloc"])
        elif what < 0.8:
            rng.choice(p.args).label = odd
        else:
            for a in p.args:
                if rng.random() < 0.5:
                    a.label = None if rng.random() < 0.5 else odd
    elif kind == "dtype":
        v = rng.choice(values)
        v.dtype = rng.choice(["f16", "f64", "i32", "bf16" if p.dtype == "f32" else "f32",
                              "complex<f32>", "index"])
    elif kind == "handwritten":
        x = p.ops[-1].result if p.ops else p.args[0]
        choice = rng.random()
        if choice < 0.2:
            r = p.raw("ar", x.shape, lambda T, r: f"{r.name} = htp.all_reduce {x.name} : {T(x)}", [x])
        elif choice < 0.35:
            b = p.arg("b", [x.shape[-1]])
            r = p.raw("ar", x.shape, lambda T, r: f"{r.name} = htp.all_reduce {x.name} bias {b.name} "
                      f"residual {x.name} {{group = \"tp\"}} : {T(x)}, {T(b)}", [x, b])
        elif choice < 0.5:
            g, b = p.arg("g", [x.shape[-1]]), p.arg("b", [x.shape[-1]])
            r = p.raw("arn", x.shape, lambda T, r: (
                f"{r.name}, {r.name}_s = htp.all_reduce_norm {x.name} norm {g.name}, {b.name} "
                f"{{epsilon = 1.0e-06 : f32, group = \"tp\"}} : {T(x)}, {T(g)}"), [x, g, b])
            r.name = r.name  # first result only is returned
        elif choice < 0.7:
            m = rng.choice([4, 8, 6])
            w1, w2 = p.arg("w1", [m, x.shape[-1]]), p.arg("w2", [x.shape[-1], m])
            uw = rng.choice([0, 1, 2, 3, 4, 5, -1, 8])
            pair = rng.choice([0, 1, 3, -1, 2**17])
            r = p.raw("mlp", x.shape, lambda T, r: (
                f"{r.name} = htp.mlp {x.name}, {w1.name}, {w2.name} approximate tanh "
                f"{{pair = {pair} : i64, unit_width = {uw} : i64}} : "
                f"({T(x)}, {T(w1)}, {T(w2)}) -> {T(r)}"), [x, w1, w2])
        elif choice < 0.8:
            w = p.arg("w", [x.shape[-1], x.shape[-1]])
            r = p.raw("lin", x.shape, lambda T, r: (
                f"{r.name} = htp.linear {x.name}, {w.name} gelu tanh residual {x.name} : "
                f"({T(x)}, {T(w)}, {T(x)}) -> {T(r)}"), [x, w])
        elif choice < 0.9:
            g, b = p.arg("g", [x.shape[-1]]), p.arg("b", [x.shape[-1]])
            r = p.raw("lng", x.shape, lambda T, r: (
                f"{r.name} = htp.layer_norm {x.name}, {g.name}, {b.name} "
                f"{{epsilon = 1.0e-06 : f32, group = \"{rng.choice(['tp', '', 'other'])}\"}} : "
                f"({T(x)}, {T(g)}, {T(b)}) -> {T(r)}"), [x, g, b])
        else:
            b = p.arg("b", [x.shape[-1]])
            r = p.raw("bar", x.shape, lambda T, r: (
                f"{r.name} = htp.bias_add {x.name}, {b.name} residual {x.name} : {T(x)}, {T(b)}"),
                [x, b])
        p.func_attrs = rng.choice(["", "", "htp.tp = 2 : i64"])
        p.results = [r] + p.results[1:]
    elif kind == "types":
        v = rng.choice(values)
        r = rng.random()
        if r < 0.3:
            v.shape = None  # unranked
        elif r < 0.6 and v.shape:
            v.shape = v.shape[:]
            v.shape[rng.randrange(len(v.shape))] = "?"
        else:
            v.shape = []  # 0-d
    elif kind == "text":
        p.text_mutation = rng.randrange(1 << 30)


def set_attr(op, key, value):
    """Sets (or adds) attribute `key` of op's attribute dictionary as text."""
    old = op.fmt

    def fmt(T, r):
        text = old(T, r)
        if "{" + key + " =" in text or ", " + key + " =" in text or "{" + key in text:
            return re.sub(r"(\b" + key + r" = )[^,}]*( : [a-z0-9]+)?", lambda m: m.group(1) + value,
                          text, count=1)
        if " {" in text.split(" : (")[0] and "{" in text:
            return text.replace("} :", f", {key} = {value}}} :", 1) if "} :" in text else text
        head, sep, tail = text.partition(" : ")
        return f"{head} {{{key} = {value}}}{sep}{tail}"
    op.fmt = fmt


def replace_operand(op, old, new):
    prev = op.fmt
    op.operands = [new if o is old else o for o in op.operands]

    def fmt(T, r):
        return prev(T, r).replace(old.name + ",", new.name + ",", 1)
    op.fmt = fmt
    op.fn = None


def mutate_text(text, seed):
    rng = random.Random(seed)
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        how = rng.random()
        i = rng.randrange(len(lines))
        if how < 0.2:
            del lines[i]
        elif how < 0.35:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif how < 0.6:
            nums = list(re.finditer(r"\b\d+\b", lines[i]))
            if nums:
                m = rng.choice(nums)
                lines[i] = lines[i][:m.start()] + str(rng.choice(
                    [0, 1, 2, 3, 2**31, 2**63, 10**30, int(m.group()) + 1])) + lines[i][m.end():]
        elif how < 0.75:
            names = re.findall(r"%[a-z_]+\d+", text)
            if len(names) >= 2:
                a, b = rng.sample(names, 2)
                lines[i] = lines[i].replace(a, b)
        elif how < 0.85:
            cut = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:cut]
        elif how < 0.88:
            # deep nesting (the tools refuse more than 1,000 brackets before parsing)
            depth = rng.choice([10, 500, 998, 999, 1000, 1001, 1002, 5000, 100000])
            lines.insert(i, "  %deep = arith.constant {a = " + "[" * depth + "1" + "]" * depth
                         + "} 0 : i32")
        elif how < 0.92:
            lines[i] = lines[i].replace("f32", rng.choice(["f16", "bf16", "i8", "f64"]))
        else:
            lines[i] = lines[i].replace("htp.", rng.choice(["htp.x", "htp.linear", "htp.attention"]), 1)
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Running the tools
# ---------------------------------------------------------------------------

class Failure(Exception):
    pass


class Runner:
    def __init__(self, a):
        self.a = a
        self.invocations = 0
        self.env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")

    def run(self, cmd, stdin=None, ok_codes=(0, 1)):
        self.invocations += 1
        try:
            proc = subprocess.run(cmd, input=stdin, capture_output=True, timeout=self.a.timeout,
                                  env=self.env)
        except OSError as e:
            raise Failure(f"cannot run {cmd[0]}: {e}")
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"") + (e.stderr or b"")
            raise Failure(f"timed out after {self.a.timeout} s\n" + out.decode("utf-8", "replace")[-4000:])
        out = proc.stderr.decode("utf-8", "replace")
        rc = proc.returncode
        if rc < 0:
            raise Failure(f"killed by signal {signal.Signals(-rc).name}\n{out[-6000:]}")
        if rc not in ok_codes:
            raise Failure(f"exit code {rc}\n{out[-6000:]}")
        for marker in CRASH_MARKERS:
            if marker in out:
                raise Failure(f"'{marker}' in the output (exit {rc})\n{out[-6000:]}")
        if rc != 0 and "error:" not in out:
            raise Failure(f"exit {rc} without a line holding 'error:'\n{out[-6000:]}")
        return rc, proc.stdout, out


def pipelines(rng, p, kind):
    """The htp-opt option lists to run a program through."""
    out = [[]]
    tps = [1, 2, 3, 4]
    pool = []
    for tp in tps:
        pool.append([f"--htp-tensor-parallel=tp={tp}"])
        pool.append([f"--htp-tensor-parallel=tp={tp}", "--htp-balance-hooks"])
    for _ in range(3):
        tp = rng.choice(tps)
        opts = [f"tp={tp}"]
        if rng.random() < 0.6:
            opts.append("shares=" + ",".join(str(rng.choice([1, 1, 2, 3, 0, -1, 5])) for _ in range(
                tp if rng.random() < 0.9 else tp + 1)))
        if rng.random() < 0.5:
            opts.append(f"spare={rng.choice([0, 10, 50, 100, 1000, 1001, -5])}")
        if rng.random() < 0.4:
            opts.append(f"mlp-unit-width={rng.choice([0, 1, 2, 3, 4, 8, -1])}")
        pool.append(["--htp-tensor-parallel=" + " ".join(opts)]
                    + (["--htp-balance-hooks"] if rng.random() < 0.5 else []))
        pool.append(["--htp-tensor-parallel=" + " ".join(opts)]
                    + (["--htp-balance-hooks"] if rng.random() < 0.3 else [])
                    + ["--htp-export-shard"])
    pool += [["--htp-fuse-linear-gelu"], ["--htp-fuse-residual"],
             ["--htp-fuse-linear-gelu", "--htp-fuse-residual"],
             ["--htp-tensor-parallel=tp=2", "--htp-fuse-linear-gelu", "--htp-fuse-residual"],
             ["--htp-tensor-parallel=tp=2", "--htp-balance-hooks", "--htp-fuse-residual"],
             ["--htp-grad"], ["--htp-tensor-parallel=tp=2", "--htp-balance-hooks", "--htp-grad"],
             ["--htp-assign-workspace"], ["--htp-assign-workspace", "--htp-lower-to-runtime"],
             ["--htp-tensor-parallel=tp=2", "--htp-export-shard"],
             ["--htp-tensor-parallel=tp=4 shares=2,1,1,1", "--htp-export-shard"],
             ["--htp-import-shard"], ["--htp-balance-hooks"], ["--htp-lower-to-runtime"]]
    for _ in range(4):
        tp = rng.choice(tps)
        opts = [f"tp={tp}"]
        if rng.random() < 0.3:
            opts.append("shares=" + ",".join(str(rng.choice([1, 2, 3])) for _ in range(tp)))
        if rng.random() < 0.3:
            opts.append(f"spare={rng.choice([0, 25, 100])}")
        for flag in ("hooks", "grad", "fuse"):
            if rng.random() < 0.25:
                opts.append(f"{flag}={rng.choice(['false', 'true'])}")
        pool.append(["--htp-pipeline=" + " ".join(opts)])
    if rng.random() < 0.3:
        odd = rng.choice([0, -1, 5, 6, 7, 8, 16, 1024, 1025, 2**31, 2**63 - 1])
        pool.append([f"--htp-tensor-parallel=tp={odd}"])
        pool.append([f"--htp-pipeline=tp={odd}"])
        pool.append([f"--htp-tensor-parallel=tp={odd}", "--htp-balance-hooks"])
    out += rng.sample(pool, min(len(pool), rng.randint(5, 9)))
    out.append([f"--htp-pipeline=tp={rng.choice(tps)}"])
    return out


def allowed_tps(p):
    return [tp for tp in (2, 3, 4) if all(h % tp == 0 for h in p.heads)
            and all(m % tp == 0 for m in p.hidden)]


class Session:
    def __init__(self, a):
        self.a = a
        self.runner = Runner(a)
        self.workdir = tempfile.mkdtemp(prefix="htp-random-programs.")
        self.stats = dict(programs=0, valid=0, invalid=0, ok=0, errors=0, numeric=0,
                          numeric_skipped=0, roundtrips=0, failures=0)
        self.skips = {}

    def attempt(self, seed, index, text, what, cmd, stdin=None, ok_codes=(0, 1), shown=None):
        """Runs cmd; a crash, hang or odd exit is recorded as a failure of
        `what` (shown as `shown`, else cmd) and gives None."""
        try:
            return self.runner.run(cmd, stdin=stdin, ok_codes=ok_codes)
        except Failure as e:
            self.fail(seed, index, text, what, shown or cmd, str(e))
            return None

    def fail(self, seed, index, text, what, cmd, output):
        self.stats["failures"] += 1
        folder = os.path.join(self.workdir, f"failure-{seed}-{index}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "program.mlir"), "w") as f:
            f.write(text)
        shown = text if len(text) < 6000 else text[:6000] + "\n... (truncated)"
        print(f"FAIL: seed {seed} program {index}: {what}\n"
              f"  rerun: {sys.argv[0]} --seed {seed} --only {index} ...\n"
              f"  program saved: {folder}/program.mlir\n"
              f"  command: {' '.join(cmd)}\n--- output ---\n{output}\n--- program ---\n{shown}",
              flush=True)

    def program(self, seed, index):
        rng = random.Random(f"{seed}:{index}")
        p, kind = gen_program(rng)
        text = p.render()
        if getattr(p, "text_mutation", None) is not None:
            text = mutate_text(text, p.text_mutation)
        self.stats["programs"] += 1
        self.stats["valid" if kind == "valid" else "invalid"] += 1
        folder = os.path.join(self.workdir, f"p{index}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "program.mlir")
        with open(path, "w") as f:
            f.write(text)
        if self.a.verbose:
            print(f"program {index}: {kind} {p.dtype} heads={p.heads} hidden={p.hidden}", flush=True)
        failed = False
        for opts in pipelines(rng, p, kind):
            cmd = [self.a.htp_opt, path] + opts
            ran = self.attempt(seed, index, text, "htp-opt crashed or hung", cmd)
            if ran is None:
                failed = True
                continue
            rc, stdout, err = ran
            if rc == 0:
                self.stats["ok"] += 1
            else:
                self.stats["errors"] += 1
            if not opts and kind == "valid" and rc != 0:
                self.fail(seed, index, text, "a program meant to be valid does not verify", cmd, err)
                failed = True
            # An empty symbol (@"") is printed as @<<INVALID EMPTY SYMBOL>>,
            # which does not parse: upstream MLIR's printer, not htp's (the
            # lowering refuses the name); no round trip for it.
            reparse = p.name != '@""'
            if rc == 0 and opts and opts[-1] == "--htp-export-shard" and not p.grid and reparse:
                # what the export states, the import reads back (a split
                # function's annotations are checked against its shards)
                icmd = [self.a.htp_opt, "-", "--htp-import-shard"]
                ran = self.attempt(seed, index, text, "importing exported shards crashed", icmd,
                                   stdin=stdout, shown=cmd + ["|"] + icmd)
                if ran is None:
                    failed = True
                    continue
                irc, _, ierr = ran
                self.stats["roundtrips"] += 1
                if irc != 0:
                    self.fail(seed, index, text, "--htp-import-shard refuses what "
                              "--htp-export-shard wrote", cmd + ["|"] + icmd, ierr)
                    failed = True
            elif rc == 0 and opts and rng.random() < 0.35 and reparse:
                # the printed output parses again
                rcmd = [self.a.htp_opt, "-"]
                ran = self.attempt(seed, index, text, "re-parsing a pass's output crashed", rcmd,
                                   stdin=stdout, shown=cmd + ["|"] + rcmd)
                if ran is None:
                    failed = True
                    continue
                rrc, _, rerr = ran
                self.stats["roundtrips"] += 1
                if rrc != 0:
                    self.fail(seed, index, text, "a pass's output does not parse again",
                              cmd + ["|"] + rcmd, rerr)
                    failed = True
        if p.grid and not failed:
            failed |= self.import_shard(seed, index, rng, p, text, folder, path)
        if kind == "valid" and p.dtype == "f32" and p.evaluable and not failed:
            if time.monotonic() < self.numeric_deadline:
                failed |= self.numerics(seed, index, rng, p, text, folder, path)
        elif (not failed and rng.random() < (0.5 if kind == "valid" else 0.15)
              and time.monotonic() < self.numeric_deadline
              and self.a.htp_run):
            # crash-only: htp-run on anything (bf16, odd programs), at odd
            # tps, shares and spare room too (2: a bad command line)
            tp = rng.choice([1, 2, 3, 4, 5, 8])
            cmd = [self.a.htp_run, path, "--iters", "1", "--warmup", "0", "--tp", str(tp)]
            if rng.random() < 0.3:
                cmd += ["--shares", ",".join(str(rng.choice([1, 2, 3, 0, 7])) for _ in range(tp))]
            if rng.random() < 0.3:
                cmd += ["--spare", str(rng.choice([0, 30, 100, 1000]))]
            if kind == "valid" and tp > 1:
                cmd += ["--check"]  # tp N against tp 1 (bf16: 2e-2)
            if tp > 1 and rng.random() < 0.3:
                cmd[cmd.index("--iters") + 1] = "6"
                cmd += ["--policy", rng.choice(["resize", "migrate", "semi"]),
                        "--slow", f"{rng.randrange(tp)}:{rng.randint(2, 8)}"]
            ran = self.attempt(seed, index, text, "htp-run crashed or hung", cmd, ok_codes=(0, 1, 2))
            if ran is None:
                failed = True
            elif b"FAILED" in ran[1]:
                self.fail(seed, index, text, "htp-run --check: tp N differs from tp 1", cmd,
                          ran[1].decode("utf-8", "replace"))
                failed = True
        if not failed and not self.a.keep_files:
            shutil.rmtree(folder, ignore_errors=True)
        return not failed

    def import_shard(self, seed, index, rng, p, text, folder, path):
        """--htp-import-shard of annotations that state the even split gives
        what --htp-tensor-parallel gives the same function unannotated."""
        n = int(p.grid.split("shape = ")[1].rstrip(")")) if p.even_annotations else 0
        opts = ["--htp-import-shard"] + ([f"--htp-import-shard=tp={n}"] if n and rng.random() < 0.3
                                         else [])
        cmd = [self.a.htp_opt, path, opts[-1]]
        ran = self.attempt(seed, index, text, "htp-opt crashed or hung", cmd)
        if ran is None:
            return True
        rc, out, err = ran
        if not p.even_annotations:
            return False
        self.stats["roundtrips"] += 1
        if rc != 0:
            self.fail(seed, index, text, "--htp-import-shard refuses annotations of the even "
                      "split", cmd, err)
            return True
        grid, annotated, shardings = p.grid, p.annotated, p.shardings
        p.grid, p.annotated, p.shardings = None, {}, []
        plain = p.render()
        p.grid, p.annotated, p.shardings = grid, annotated, shardings
        scmd = [self.a.htp_opt, "-", f"--htp-tensor-parallel=tp={n}"]
        ran = self.attempt(seed, index, plain, "htp-opt crashed or hung", scmd, stdin=plain.encode())
        if ran is None:
            return True
        src, sout, serr = ran
        if src == 0 and sout != out:
            self.fail(seed, index, text, "--htp-import-shard and --htp-tensor-parallel differ",
                      cmd, "--- import ---\n" + out.decode() + "--- split ---\n" + sout.decode())
            return True
        return False

    def numerics(self, seed, index, rng, p, text, folder, path):
        """Runs the block with htp-run at tp 1 and at a tp it allows."""
        nrng = np.random.default_rng(abs(hash((seed, index))) % (2**32))
        feeds, weights, inputs = {}, {}, []
        for a in p.args:
            shape = tuple(a.shape)
            if a.targets:
                z = nrng.standard_normal(shape) * 2
                value = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
            elif not a.weight:
                value = nrng.standard_normal(shape)
            elif len(shape) == 1:
                value = nrng.standard_normal(shape) * 0.5 + (1.0 if "ln_w" in a.name else 0.0)
            else:
                value = nrng.standard_normal(shape) / math.sqrt(shape[-1])
            value = value.astype(np.float32)
            feeds[a.name] = value
            if a.kind == "input":
                ipath = os.path.join(folder, f"in{len(inputs)}.npy")
                np.save(ipath, value)
                inputs.append(ipath)
            else:
                weights[a.label] = value
        wpath = os.path.join(folder, "w.safetensors")
        if weights:
            check_e2e.write_safetensors(wpath, weights)
        ref = p.evaluate(feeds, np.float64)
        ref32 = p.evaluate(feeds, np.float32)
        tps = [1]
        allowed = allowed_tps(p)
        if allowed:
            tps.append(rng.choice(allowed))
        outs = {}
        for tp in tps:
            extra = []
            if tp > 1 and rng.random() < 0.3:
                extra += ["--spare", str(rng.choice([0, 50, 100]))]
            if tp > 1 and rng.random() < 0.3:
                extra += ["--shares", ",".join(str(rng.randint(1, 3)) for _ in range(tp))]
            runtime = []
            if tp > 1 and rng.random() < 0.35:
                # a straggler whose units migrate to the others: exact (DESIGN §4)
                runtime = ["--policy", "migrate", "--slow", f"{rng.randrange(tp)}:{rng.randint(2, 6)}"]
            target = path
            if self.a.htp_compile and rng.random() < 0.3:
                # ahead of time: htp-compile's .so at this tp, run by htp-run
                target = os.path.join(folder, f"block{tp}.so")
                ccmd = [self.a.htp_compile, path, "-o", target, f"--tp={tp}"]
                if p.duplicate:
                    ccmd += [f"--entry={p.name[1:]}"]
                ccmd += [f"{o}={v}" for o, v in zip(extra[::2], extra[1::2])]
                extra = []
                ran = self.attempt(seed, index, text, "htp-compile crashed or hung", ccmd)
                if ran is None:
                    return True
                crc, _, cerr = ran
                if crc != 0:
                    if tp == 1:
                        self.fail(seed, index, text, "htp-compile refuses a valid program", ccmd,
                                  cerr)
                        return True
                    self.stats["numeric_skipped"] += 1
                    continue
            cmd = [self.a.htp_run, target, "--iters", "1", "--warmup", "0", "--tp", str(tp)]
            if p.duplicate and target == path:
                cmd += ["--entry", p.name[1:]]
            cmd += [] if not weights else ["--weights", wpath]
            for ipath in inputs:
                cmd += ["--input", ipath]
            opaths = [os.path.join(folder, f"y{tp}_{i}.npy") for i in range(len(p.results))]
            for o in opaths:
                cmd += ["--output", o]
            cmd += extra
            if runtime:
                cmd[cmd.index("--iters") + 1] = "8"
                cmd += runtime
            ran = self.attempt(seed, index, text, "htp-run crashed or hung", cmd)
            if ran is None:
                return True
            rc, _, err = ran
            if rc != 0:
                first = next((line for line in err.splitlines() if "error:" in line), err)
                key = first.split(".mlir:", 1)[-1].split(": ", 1)[-1][:70]
                self.skips[key] = self.skips.get(key, 0) + 1
                self.stats["numeric_skipped"] += 1
                if tp == 1:
                    self.fail(seed, index, text, "htp-run refuses a valid program at tp 1", cmd, err)
                    return True
                if self.a.verbose:
                    print(f"  htp-run tp {tp} refused: {first}")
                continue
            outs[tp] = [np.load(o).astype(np.float64) for o in opaths]
            self.stats["numeric"] += 1
            for i, (got, r64, r32) in enumerate(zip(outs[tp], ref, ref32)):
                if got.shape != r64.shape:
                    self.fail(seed, index, text, f"result {i} has shape {got.shape}, "
                              f"reference {r64.shape}", cmd, err)
                    return True
                scale = max(np.abs(r64).max(), 1e-30)
                e = np.abs(got - r64).max() / scale
                floor = 8 * np.abs(r32 - r64).max() / scale
                if not (e <= max(TOL, floor)):
                    self.fail(seed, index, text,
                              f"result {i} at tp {tp}: max |y - ref| / max |ref| = {e:.3g} "
                              f"> {max(TOL, floor):.3g} (files in {folder})", cmd, err)
                    self.a.keep_files = True
                    return True
                if tp > 1:
                    base = outs[1][i]
                    e1 = np.abs(got - base).max() / max(np.abs(base).max(), 1e-30)
                    if not (e1 <= max(TOL, floor)):
                        self.fail(seed, index, text, f"result {i}: tp {tp} differs from tp 1 by "
                                  f"{e1:.3g}", cmd, err)
                        return True
        if p.loss and 1 in outs:
            return self.gradients(seed, index, rng, p, text, folder, path, feeds, weights, wpath,
                                  inputs)
        return False

    def gradients(self, seed, index, rng, p, text, folder, path, feeds, weights, wpath, inputs):
        """@NAME_grad at tp 1: each parameter's gradient against a central
        finite difference of the float64 reference along a random direction."""
        params = [a for a in p.args if a.kind == "param"]
        entry = p.name[1:] + "_grad"
        cmd = [self.a.htp_run, path, "--entry", entry, "--iters", "1", "--warmup", "0"]
        cmd += [] if not weights else ["--weights", wpath]
        for ipath in inputs:
            cmd += ["--input", ipath]
        opaths = [os.path.join(folder, f"g_{i}.npy") for i in range(len(p.results) + len(params))]
        for o in opaths:
            cmd += ["--output", o]
        ran = self.attempt(seed, index, text, "htp-run crashed or hung", cmd)
        if ran is None:
            return True
        rc, _, err = ran
        if rc != 0:
            self.fail(seed, index, text, "htp-run refuses the gradient of a valid loss", cmd, err)
            return True
        self.stats["numeric"] += 1
        grads = [np.load(o).astype(np.float64) for o in opaths[len(p.results):]]
        loss0 = p.evaluate(feeds)[0][0]
        drng = np.random.default_rng(index)
        for a, g in rng.sample(list(zip(params, grads)), min(len(params), 10)):
            if g.shape != tuple(a.shape):
                self.fail(seed, index, text, f"the gradient of {a.name} has shape {g.shape}, "
                          f"the parameter {tuple(a.shape)}", cmd, err)
                return True
            v = drng.standard_normal(g.shape)
            eps = 1e-5
            plus, minus = dict(feeds), dict(feeds)
            base = feeds[a.name].astype(np.float64)
            plus[a.name], minus[a.name] = base + eps * v, base - eps * v
            fd = (p.evaluate(plus)[0][0] - p.evaluate(minus)[0][0]) / (2 * eps)
            got = float((g * v).sum())
            bound = 1e-3 * np.linalg.norm(g) * np.linalg.norm(v) + 1e-6 * max(1.0, abs(loss0))
            if not abs(got - fd) <= bound:
                self.fail(seed, index, text,
                          f"d(loss)/d({a.name}) along a random direction: htp {got:.6g}, finite "
                          f"difference {fd:.6g} (bound {bound:.3g}; files in {folder})", cmd, err)
                self.a.keep_files = True
                return True
        allowed = allowed_tps(p)
        if not allowed:
            return False
        # split: rank 0's gradients, each its shard of the tp-1 gradient
        tp = rng.choice(allowed)
        cmd_tp = cmd + ["--tp", str(tp)]
        for o in opaths:
            cmd_tp[cmd_tp.index(o)] = o.replace("g_", f"g{tp}_")
        ran = self.attempt(seed, index, text, "htp-run crashed or hung", cmd_tp)
        if ran is None:
            return True
        rc, _, err = ran
        if rc != 0:
            self.stats["numeric_skipped"] += 1
            return False
        self.stats["numeric"] += 1
        # f32 round-off of the sums behind a gradient is relative to the
        # largest gradient of the block, not to a tiny one's own size
        # (a layer norm over 2 channels has gradients of 1e-7 at a loss of 1)
        overall = max((np.abs(g).max() for g in grads if g.size), default=0.0)
        for a, g, o in zip(params, grads, opaths[len(p.results):]):
            got = np.load(o.replace("g_", f"g{tp}_")).astype(np.float64)
            if got.shape == g.shape:
                want = g
            elif "wqkv" in a.name or "bqkv" in a.name:
                inner = g.shape[0] // 3
                want = np.concatenate([g[k * inner:k * inner + inner // tp] for k in range(3)])
            elif got.shape[0] * tp == g.shape[0]:
                want = g[:got.shape[0]]
            elif got.ndim == 2 and got.shape[1] * tp == g.shape[1]:
                want = g[:, :got.shape[1]]
            else:
                self.fail(seed, index, text, f"the tp {tp} gradient of {a.name} has shape "
                          f"{got.shape}, at tp 1 {g.shape}", cmd_tp, err)
                return True
            e = np.abs(got - want).max() / max(np.abs(g).max(), 1e-3 * overall, 1e-30)
            if not e <= 1e-3:
                self.fail(seed, index, text, f"rank 0's gradient of {a.name} at tp {tp} differs "
                          f"from its part of tp 1's by {e:.3g} (files in {folder})", cmd_tp, err)
                self.a.keep_files = True
                return True
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--htp-opt", help="the htp-opt binary (required but with --print)")
    parser.add_argument("--htp-run", help="the htp-run binary (numeric checks; none without)")
    parser.add_argument("--htp-compile", help="the htp-compile binary (some numeric checks run "
                        "its .so instead of the JIT)")
    parser.add_argument("--seed", type=int, default=1, help="the seed (default 1)")
    parser.add_argument("--seconds", type=float, default=45.0,
                        help="time budget: no new program starts after it (default 45)")
    parser.add_argument("--numeric-fraction", type=float, default=0.6,
                        help="share of the budget in which htp-run checks run (default 0.6)")
    parser.add_argument("--max-programs", type=int, default=1 << 30,
                        help="stop after this many programs too")
    parser.add_argument("--only", type=int, help="run program ONLY of the seed alone")
    parser.add_argument("--start", type=int, default=0, help="first program number (default 0)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds an invocation may take before it counts as a hang (default 60)")
    parser.add_argument("--keep-going", action="store_true", help="go on after a failure")
    parser.add_argument("--keep-files", action="store_true", help="keep every program's folder")
    parser.add_argument("--print", action="store_true", dest="print_only",
                        help="print the programs (with --only: that one) and run nothing")
    parser.add_argument("--verbose", action="store_true",
                        help="a line per program, and htp-run's refusals")
    a = parser.parse_args()
    if not a.htp_opt and not a.print_only:
        parser.error("--htp-opt is required")
    if a.print_only:
        for index in ([a.only] if a.only is not None else range(a.start, a.start + 10)):
            rng = random.Random(f"{a.seed}:{index}")
            p, kind = gen_program(rng)
            text = p.render()
            if getattr(p, "text_mutation", None) is not None:
                text = mutate_text(text, p.text_mutation)
            print(f"// program {index}: {kind}\n{text}")
        return 0
    s = Session(a)
    start = time.monotonic()
    s.numeric_deadline = start + a.seconds * a.numeric_fraction
    if a.only is not None:
        s.numeric_deadline = float("inf")
    indices = [a.only] if a.only is not None else range(a.start, a.start + a.max_programs)
    ok = True
    for index in indices:
        if a.only is None and time.monotonic() - start > a.seconds:
            break
        if not s.program(a.seed, index):
            ok = False
            if not a.keep_going:
                break
    st = s.stats
    if ok and not a.keep_files:
        shutil.rmtree(s.workdir, ignore_errors=True)
    if a.verbose and s.skips:
        print("htp-run refusals:", s.skips)
    print(f"random programs: seed {a.seed}, {st['programs']} programs ({st['valid']} valid, "
          f"{st['invalid']} malformed), {s.runner.invocations} invocations ({st['ok']} ok, "
          f"{st['errors']} clean errors, {st['roundtrips']} round trips), {st['numeric']} numeric "
          f"checks ({st['numeric_skipped']} refused), {st['failures']} failures, "
          f"{time.monotonic() - start:.1f} s" + ("" if ok else f"; files in {s.workdir}"))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

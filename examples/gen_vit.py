#!/usr/bin/env python3
"""Writes a ViT encoder (a stack of timm-style blocks) or a whole ViT in the htp dialect.

Each block is x + attn(norm1(x)), then x + mlp(norm2(x)), with the parameter
names timm uses (blocks.{i}.norm1.weight, ...), so a timm state dict saved as
safetensors binds to the arguments by name. The entry function takes the input
x [batch, tokens, dim] first, then the 12 parameters of each block in timm's
order, and returns y [batch, tokens, dim].

With --dtype bf16 every tensor (input, parameters, activations, result) is
bf16: the htp dialect takes a block that is all f32 or all bf16. The layer
norms' epsilon stays an f32 attribute.

    gen_vit.py --depth 1 --dim 768 --heads 12 --mlp 3072 --tokens 197 --batch 8 -o block.mlir
    gen_vit.py --dtype bf16 -o block_bf16.mlir

--model writes a whole ViT instead (issue 9's training spec, section F): two
functions, @vit (images -> logits) and @vit_loss (images, targets -> mean
cross-entropy loss, logits), f32 only. Images are [batch, channels, image,
image]; targets [batch, classes] hold class probabilities (one-hot rows for
labels). The parameters, in timm's state_dict order and with its names:
cls_token [1,1,dim], pos_embed [1,N+1,dim] (N = (image/patch)^2),
patch_embed.proj.weight [dim,channels,patch,patch], patch_embed.proj.bias,
the blocks' (as above), norm.weight, norm.bias, head.weight [classes,dim],
head.bias. It is timm's VisionTransformer(img_size=image, patch_size=patch,
in_chans=channels, num_classes=classes, embed_dim=dim, depth=depth,
num_heads=heads, mlp_ratio=mlp/dim, qkv_bias=True, global_pool='token',
class_token=True): patch_embed, embed_tokens (class token + position
embedding), the blocks, the final layer_norm, cls_token (token 0), head.
--tokens is not taken with --model (it is N+1).

    gen_vit.py --model --depth 2 --dim 64 --heads 4 --patch 4 --image 28 --channels 1 \\
               --classes 10 --batch 32 -o vit.mlir
"""
import argparse
import math
import os
import re
import sys
import tempfile

PARAMS = [  # (suffix, shape as a function of dim and mlp)
    ("norm1.weight", lambda d, m: [d]),
    ("norm1.bias", lambda d, m: [d]),
    ("attn.qkv.weight", lambda d, m: [3 * d, d]),
    ("attn.qkv.bias", lambda d, m: [3 * d]),
    ("attn.proj.weight", lambda d, m: [d, d]),
    ("attn.proj.bias", lambda d, m: [d]),
    ("norm2.weight", lambda d, m: [d]),
    ("norm2.bias", lambda d, m: [d]),
    ("mlp.fc1.weight", lambda d, m: [m, d]),
    ("mlp.fc1.bias", lambda d, m: [m]),
    ("mlp.fc2.weight", lambda d, m: [d, m]),
    ("mlp.fc2.bias", lambda d, m: [d]),
]


DTYPES = ("f32", "bf16")  # the element types of the htp dialect

# What htp's verifier and htp-compile take (runtime/htp_entry.h, dialect/HTPOps.cpp,
# passes/LowerToRuntime.cpp): every dim from 1 to 2^31-1, no tensor over 2^40
# bytes, no matrix (a tensor's elements over its last dim) with more than
# 2^31-1 rows, at most 4096 arguments and 4096-byte names. The layer norms'
# epsilon is an f32 attribute that must be positive and finite: a normal f32
# once written with 7 significant digits.
MAX_DIM = 2**31 - 1
MAX_TENSOR_BYTES = 1 << 40
MAX_ARGUMENTS = 4096
MAX_NAME = 4096 - len("_loss_grad")  # htp-compile --grad adds _grad to NAME_loss
F32_MIN_NORMAL = 2.0**-126
F32_MAX = (2 - 2.0**-23) * 2.0**127
SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*\Z")  # an MLIR bare symbol name


def tensor_type(shape, dtype="f32"):
    return "tensor<" + "x".join(str(s) for s in shape) + f"x{dtype}>"


def block_lines(i, x, dim, heads, mlp, act, hidden, eps, gelu, tensor):
    """The ops of block i on the value x (type act); returns (lines, output value)."""
    p = lambda suffix: f"%blocks_{i}_{suffix.replace('.', '_')}"
    vec = tensor([dim])
    lines = [
        f"  // block {i}",
        f"  %b{i}_n1 = htp.layer_norm {x}, {p('norm1.weight')}, {p('norm1.bias')} "
        f"{{epsilon = {eps:e} : f32}} : ({act}, {vec}, {vec}) -> {act}",
        f"  %b{i}_attn = htp.attention %b{i}_n1, {p('attn.qkv.weight')}, {p('attn.qkv.bias')}, "
        f"{p('attn.proj.weight')}, {p('attn.proj.bias')} {{num_heads = {heads} : i64}} : "
        f"({act}, {tensor([3 * dim, dim])}, {tensor([3 * dim])}, {tensor([dim, dim])}, {vec}) -> {act}",
        f"  %b{i}_r1 = htp.add {x}, %b{i}_attn : {act}",
        f"  %b{i}_n2 = htp.layer_norm %b{i}_r1, {p('norm2.weight')}, {p('norm2.bias')} "
        f"{{epsilon = {eps:e} : f32}} : ({act}, {vec}, {vec}) -> {act}",
        f"  %b{i}_fc1 = htp.linear %b{i}_n2, {p('mlp.fc1.weight')}, {p('mlp.fc1.bias')} : "
        f"({act}, {tensor([mlp, dim])}, {tensor([mlp])}) -> {hidden}",
        f"  %b{i}_act = htp.gelu %b{i}_fc1 approximate {gelu} : {hidden}",
        f"  %b{i}_fc2 = htp.linear %b{i}_act, {p('mlp.fc2.weight')}, {p('mlp.fc2.bias')} : "
        f"({hidden}, {tensor([dim, mlp])}, {vec}) -> {act}",
        f"  %b{i}_out = htp.add %b{i}_r1, %b{i}_fc2 : {act}",
    ]
    return lines, f"%b{i}_out"


def model_params(depth, dim, mlp, patch, image, channels, classes):
    """(timm name, shape) of every parameter of the whole ViT, in timm's
    state_dict order."""
    tokens = (image // patch) ** 2 + 1
    params = [("cls_token", [1, 1, dim]), ("pos_embed", [1, tokens, dim]),
              ("patch_embed.proj.weight", [dim, channels, patch, patch]),
              ("patch_embed.proj.bias", [dim])]
    for i in range(depth):
        params += [(f"blocks.{i}.{suffix}", shape(dim, mlp)) for suffix, shape in PARAMS]
    params += [("norm.weight", [dim]), ("norm.bias", [dim]),
               ("head.weight", [classes, dim]), ("head.bias", [classes])]
    return params


def generate_model(depth, dim, heads, mlp, patch, image, channels, classes, batch, eps, gelu,
                   name="vit"):
    """The whole ViT: @name (images -> logits) and @name_loss (images, targets ->
    loss, logits), f32 (the training ops are f32 only)."""
    if dim % heads:
        raise ValueError(f"--dim {dim} is not divisible by --heads {heads}")
    if image % patch:
        raise ValueError(f"--image {image} is not a multiple of --patch {patch}")
    tensor = tensor_type
    patches = (image // patch) ** 2
    tokens = patches + 1
    params = model_params(depth, dim, mlp, patch, image, channels, classes)
    images_t = tensor([batch, channels, image, image])
    targets_t = tensor([batch, classes])
    act = tensor([batch, tokens, dim])
    hidden = tensor([batch, tokens, mlp])
    logits_t = tensor([batch, classes])
    loss_t = tensor([1])
    pv = lambda pname: "%" + pname.replace(".", "_")
    param_args = [f"{pv(n)}: {tensor(s)} {{htp.param = \"{n}\"}}" for n, s in params]
    images_arg = f"%images: {images_t} {{htp.input = \"images\"}}"
    targets_arg = f"%targets: {targets_t} {{htp.input = \"targets\"}}"

    body = [
        f"  %patches = htp.patch_embed %images, %patch_embed_proj_weight, %patch_embed_proj_bias "
        f"{{patch = {patch} : i64}} : ({images_t}, {tensor([dim, channels, patch, patch])}, "
        f"{tensor([dim])}) -> {tensor([batch, patches, dim])}",
        f"  %x0 = htp.embed_tokens %patches, %cls_token, %pos_embed : "
        f"({tensor([batch, patches, dim])}, {tensor([1, 1, dim])}, {tensor([1, tokens, dim])}) "
        f"-> {act}",
    ]
    x = "%x0"
    for i in range(depth):
        lines, x = block_lines(i, x, dim, heads, mlp, act, hidden, eps, gelu, tensor)
        body += lines
    vec = tensor([dim])
    # timm: norm over every token, then the class token (global_pool='token').
    body += [
        f"  %normed = htp.layer_norm {x}, %norm_weight, %norm_bias {{epsilon = {eps:e} : f32}} : "
        f"({act}, {vec}, {vec}) -> {act}",
        f"  %pooled = htp.cls_token %normed : ({act}) -> {tensor([batch, dim])}",
        f"  %logits = htp.linear %pooled, %head_weight, %head_bias : "
        f"({tensor([batch, dim])}, {tensor([classes, dim])}, {tensor([classes])}) -> {logits_t}",
    ]
    header = (f"// ViT, generated by examples/gen_vit.py --model: depth={depth} dim={dim} "
              f"heads={heads} mlp={mlp} patch={patch} image={image} channels={channels} "
              f"classes={classes} batch={batch} eps={eps} gelu={gelu}")
    sep = ",\n    "
    lines = [header,
             f"func.func @{name}(" + sep.join([images_arg] + param_args)
             + f") -> ({logits_t} {{htp.result = \"logits\"}}) {{"]
    lines += body + [f"  return %logits : {logits_t}", "}", ""]
    lines += [f"func.func @{name}_loss(" + sep.join([images_arg, targets_arg] + param_args)
              + f") -> ({loss_t} {{htp.result = \"loss\"}}, "
              f"{logits_t} {{htp.result = \"logits\"}}) {{"]
    lines += body + [
        f"  %loss = htp.cross_entropy %logits, %targets : ({logits_t}, {targets_t}) -> {loss_t}",
        f"  return %loss, %logits : {loss_t}, {logits_t}", "}", ""]
    return "\n".join(lines)


def generate(depth, dim, heads, mlp, tokens, batch, eps, gelu, name, dtype="f32"):
    if dim % heads:
        raise ValueError(f"--dim {dim} is not divisible by --heads {heads}")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype}")

    def tensor(shape):
        return "tensor<" + "x".join(str(s) for s in shape) + f"x{dtype}>"

    act = tensor([batch, tokens, dim])
    hidden = tensor([batch, tokens, mlp])
    args = [f"%x: {act} {{htp.input = \"x\"}}"]
    for i in range(depth):
        for suffix, shape in PARAMS:
            pname = f"blocks.{i}.{suffix}"
            args.append(f"%{pname.replace('.', '_')}: {tensor(shape(dim, mlp))} "
                        f"{{htp.param = \"{pname}\"}}")
    lines = [
        f"// ViT encoder, generated by examples/gen_vit.py: depth={depth} dim={dim} "
        f"heads={heads} mlp={mlp} tokens={tokens} batch={batch} eps={eps} gelu={gelu}"
        + ("" if dtype == "f32" else f" dtype={dtype}"),
        f"func.func @{name}(" + ",\n    ".join(args) + f") -> {act} {{",
    ]
    x = "%x"
    for i in range(depth):
        block, x = block_lines(i, x, dim, heads, mlp, act, hidden, eps, gelu, tensor)
        lines += block
    lines += [f"  return {x} : {act}", "}", ""]
    return "\n".join(lines)


def count(text):
    """A size option: a whole number from 1 to 2^31-1 (htp's dims)."""
    # ASCII digits only: int() also takes " 32", "+32", "1_024" and other
    # scripts' digits.
    if not re.fullmatch(r"-?[0-9]+", text, re.ASCII):
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number")
    value = int(text)
    if not 1 <= value <= MAX_DIM:
        raise argparse.ArgumentTypeError(f"{text} is out of range: must be from 1 to 2^31-1")
    return value


def epsilon(text):
    """--eps: finite, > 0, and a normal f32 as the IR writes it ({eps:e})."""
    # Plain decimal only: float() also takes " 1e-5", "1_0" and other
    # scripts' digits ("nan" and "inf" are refused below, by name).
    if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        value = float(text)
    elif re.fullmatch(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text, re.ASCII):
        value = float(text)
    else:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number")
    if not (math.isfinite(value) and F32_MIN_NORMAL <= float(f"{value:e}") <= F32_MAX):
        raise argparse.ArgumentTypeError(
            f"{text} is not a positive, finite normal f32 (from 1.2e-38 to 3.4e38; htp's "
            "verifier takes a positive and finite epsilon)")
    return value


def symbol(text):
    """--name: an MLIR bare symbol name the tools take."""
    if not SYMBOL.match(text):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not an MLIR symbol name: a letter or '_', then letters, digits, "
            "'_', '$' or '.'")
    if len(text) > MAX_NAME:
        raise argparse.ArgumentTypeError(f"a name of {len(text)} bytes is longer than {MAX_NAME}")
    return text


def size_problem(tensors, elem_bytes):
    """Why the first of tensors, (options, what, shape), is beyond htp's
    limits (None if none is)."""
    for options, what, shape in tensors:
        rows = math.prod(shape[:-1])
        text = f"{options}: {what} [{'x'.join(str(s) for s in shape)}]"
        if max(shape) > MAX_DIM:
            return f"{text}: a dim above 2^31-1 (htp's limit)"
        if rows > MAX_DIM:
            return f"{text}: more than 2^31-1 rows (BLAS's int dims)"
        if math.prod(shape) * elem_bytes > MAX_TENSOR_BYTES:
            return f"{text}: more than 2^40 bytes (htp's limit per tensor)"
    return None


def io_error(message):
    """A failure to write (not a bad command line): one line, exit 1."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    sys.exit(1)


def write_output(parser, path, text):
    """Writes text to path ("-": stdout) whole or not at all; a bad -o is
    parser.error naming it (exit 2), a failed write io_error (exit 1). A regular file (or a new one) is written to a
    temporary beside it, then renamed over it; anything else (/dev/null, a
    pipe) is written in place."""
    data = text.encode()
    if path == "-":
        try:
            # fd 1 itself, not sys.stdout's buffer: nothing is left for
            # Python to flush (and fail on) at exit; sys.stdout is None when
            # fd 1 was closed at start.
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
        except OSError as e:
            io_error(f"-o -: cannot write to stdout: {e.strerror}")
        return
    if not path:
        parser.error("-o '': an empty path")
    target = os.path.realpath(path)
    if os.path.isdir(target):
        parser.error(f"-o {path}: is a directory")
    if path.endswith("/"):  # realpath drops the '/': x.mlir/ would write x.mlir
        parser.error(f"-o {path}: ends in '/', a folder, not a file")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        parser.error(f"-o {path}: no folder {os.path.dirname(path) or folder}")
    try:
        if os.path.exists(target) and not os.path.isfile(target):
            with open(target, "wb") as f:  # a device or a pipe: nothing to rename over
                f.write(data)
            return
    except OSError as e:
        io_error(f"-o {path}: {e.strerror}")
    temporary = None
    try:
        if os.path.isfile(target):
            mode = os.stat(target).st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        try:
            fd, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp",
                                             prefix="." + os.path.basename(target) + ".")
        except OSError as e:
            io_error(f"-o {path}: cannot create a file in {folder}: {e.strerror or e}")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as e:
        if temporary:
            try:
                os.unlink(temporary)
            except OSError:
                pass
        io_error(f"-o {path}: {e.strerror or e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="store_true",
                        help="write the whole ViT (@vit and @vit_loss, f32) instead of the "
                             "encoder blocks alone")
    parser.add_argument("--depth", type=count, default=1, help="blocks in a row (default 1)")
    parser.add_argument("--dim", type=count, default=768, help="model width (default 768)")
    parser.add_argument("--heads", type=count, default=12, help="attention heads (default 12)")
    parser.add_argument("--mlp", type=count, default=None, help="MLP hidden width (default 4*dim)")
    parser.add_argument("--tokens", type=count, default=None,
                        help="tokens per image (default 197; blocks only: with --model it is "
                             "(image/patch)^2 + 1)")
    parser.add_argument("--batch", type=count, default=8, help="images per batch (default 8)")
    parser.add_argument("--eps", type=epsilon, default=1e-6,
                        help="layer norm epsilon (default 1e-6)")
    parser.add_argument("--gelu", choices=["none", "tanh"], default="none",
                        help="GELU approximation (default none: exact erf)")
    parser.add_argument("--dtype", choices=DTYPES, default="f32",
                        help="element type of every tensor (default f32); epsilon stays f32; "
                             "--model takes f32 only")
    model = parser.add_argument_group("whole model (--model only)")
    model.add_argument("--patch", type=count, help="patch side in pixels (default 16)")
    model.add_argument("--image", type=count,
                       help="image side in pixels, a multiple of --patch (default 224)")
    model.add_argument("--channels", type=count, help="image channels (default 3)")
    model.add_argument("--classes", type=count, help="classes (default 1000)")
    parser.add_argument("--name", type=symbol, default=None,
                        help="entry function name (default vit_block; with --model, vit: the "
                             "loss function is NAME_loss)")
    parser.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    a = parser.parse_args()
    model_defaults = {"patch": 16, "image": 224, "channels": 3, "classes": 1000}
    for flag, default in model_defaults.items():
        if getattr(a, flag) is None:
            setattr(a, flag, default)
        elif not a.model:
            parser.error(f"--{flag} is taken with --model only")
    mlp = a.mlp if a.mlp is not None else 4 * a.dim
    mlp_option = "--mlp" if a.mlp is not None else "--dim (--mlp is 4*dim)"
    if a.model:
        if a.tokens is not None:
            parser.error("--tokens is not taken with --model: tokens are "
                         "(image/patch)^2 + 1")
        if a.dtype != "f32":
            parser.error("--model writes f32 only (the training ops are f32-only)")
        # images, patch embedding and head, then the blocks' own tensors.
        arguments = 2 + 4 + 12 * a.depth + 4
        tokens = (a.image // a.patch) ** 2 + 1
        tokens_option = "--image, --patch"
        tensors = [
            ("--batch, --channels, --image", "the images", [a.batch, a.channels, a.image, a.image]),
            ("--batch, --classes", "the logits", [a.batch, a.classes]),
            ("--channels, --patch", "a patch vector (channels*patch*patch)",
             [a.channels * a.patch * a.patch]),
            ("--dim, --channels, --patch", "patch_embed.proj.weight",
             [a.dim, a.channels, a.patch, a.patch]),
            ("--image, --patch, --dim", "pos_embed", [1, tokens, a.dim]),
            ("--classes, --dim", "head.weight", [a.classes, a.dim]),
        ]
    else:
        arguments = 1 + 12 * a.depth
        tokens = a.tokens if a.tokens is not None else 197
        tokens_option = "--tokens"
        tensors = []
    if arguments > MAX_ARGUMENTS:
        parser.error(f"--depth {a.depth}: {arguments} arguments, but an htp entry point takes "
                     f"at most {MAX_ARGUMENTS} (--depth at most "
                     f"{(MAX_ARGUMENTS - arguments + 12 * a.depth) // 12})")
    tensors += [
        (f"--batch, {tokens_option}, --dim", "the activations", [a.batch, tokens, a.dim]),
        (f"--batch, {tokens_option}, {mlp_option}", "the MLP's hidden activations",
         [a.batch, tokens, mlp]),
        ("--dim", "attn.qkv.weight", [3 * a.dim, a.dim]),
        (f"{mlp_option}, --dim", "mlp.fc1.weight", [mlp, a.dim]),
    ]
    problem = size_problem(tensors, 2 if a.dtype == "bf16" else 4)
    if problem:
        parser.error(problem)
    try:
        if a.model:
            text = generate_model(a.depth, a.dim, a.heads, mlp, a.patch, a.image, a.channels,
                                  a.classes, a.batch, a.eps, a.gelu, a.name or "vit")
        else:
            text = generate(a.depth, a.dim, a.heads, mlp, tokens, a.batch, a.eps, a.gelu,
                            a.name or "vit_block", a.dtype)
    except ValueError as e:
        parser.error(str(e))
    write_output(parser, a.output, text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# test/runtime/check_visibility.py - libhtprt exports exactly its public API,
# and each public header serves its audience on its own.
#
#   check_visibility.py --nm NM --library SHARED_OBJECT --cc CC --cxx CXX
#       --root SOURCE_DIR --embedding runtime/htp.h --abi runtime/htp_ops.h
#       --header runtime/htp_entry.h --lowering passes/OpLowerings.cpp
#
# Checks, each failure named on its own line:
#   1. Each public header compiles on its own (a TU that includes just that
#      header, twice), as C11 and as C++17, with -Wall -Wextra -Wpedantic
#      -Werror, and includes no header of the project but public runtime
#      headers (the ABI header may also include kernels/htp_scratch.h, the
#      header-only scratch formulas its callers size scratch with).
#   2. Every function a public header declares is exported by the shared
#      object (libhtprt linked whole). The declarations are the compiler's
#      (gcc -aux-info), not a pattern, so a declaration that lost HTP_API
#      (or moved to a header without it) is caught: it would be hidden.
#      Every one is also written with HTP_API.
#   3. Nothing else is exported: no htp__ helper, no private function, no
#      symbol of any other name (beyond what the linker defines).
#   4. The audiences: the op entry points (htp_op_*) and the balance hooks
#      (htp_rt_*) are declared in the ABI header and in no other; the
#      embedding header declares none of them.
#   5. Every runtime function the lowering calls by name (the strings of
#      passes/OpLowerings.cpp) is declared in the ABI header (the block's
#      all-reduce, htp_allreduce_sum_*, in the embedding header) and exported.
# Exit 0, or 1 naming the offenders.
import argparse
import os
import re
import subprocess
import sys
import tempfile

# What a linker defines in any shared object.
LINKER_SYMBOLS = {"_init", "_fini", "__bss_start", "_edata", "_end", "__end__", "_etext"}
# The one kernel header a public header may include: header-only formulas.
ABI_EXTRA_INCLUDES = {"kernels/htp_scratch.h"}


def compile_alone(compiler, lang, std, root, header, extra):
    """Compiles a TU that includes just `header` (twice: the guard)."""
    source = f'#include "{header}"\n#include "{header}"\n'
    cmd = [compiler, "-x", lang, f"-std={std}", "-I", root, "-Wall", "-Wextra",
           "-Wpedantic", "-Werror", "-fsyntax-only"] + extra + ["-"]
    return subprocess.run(cmd, input=source, capture_output=True, text=True)


def project_includes(cc, root, header):
    """The project headers `header` includes, transitively (relative paths)."""
    out = subprocess.run([cc, "-x", "c", "-std=c11", "-I", root, "-MM", "-MT", "x", "-"],
                         input=f'#include "{header}"\n', capture_output=True, text=True,
                         check=True).stdout
    paths = out.replace("\\\n", " ").split(":", 1)[1].split()
    rel = set()
    for path in paths:
        full = os.path.realpath(path if os.path.isabs(path) else os.path.join(root, path))
        rel.add(os.path.relpath(full, os.path.realpath(root)))
    return rel


def declared_functions(cc, root, header):
    """Functions `header` itself declares (not defines), per gcc -aux-info."""
    with tempfile.TemporaryDirectory() as tmp:
        tu, aux = os.path.join(tmp, "tu.c"), os.path.join(tmp, "aux.txt")
        with open(tu, "w", encoding="utf-8") as f:
            f.write(f'#include "{header}"\n')
        r = subprocess.run([cc, "-std=c11", "-I", root, "-fsyntax-only", "-aux-info", aux, tu],
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(aux):
            # Not gcc: fall back to the HTP_API pattern (a declaration that
            # lost HTP_API then goes unseen by this check).
            print(f"note: {cc} has no -aux-info; reading {header}'s HTP_API lines instead")
            return htp_api_functions(root, header)
        with open(aux, encoding="utf-8") as f:
            lines = f.read().splitlines()
    target = os.path.realpath(os.path.join(root, header))
    names = set()
    for line in lines:
        m = re.match(r"/\* (.+):(\d+):([NO])([CF]) \*/ (.*)", line)
        if not m or m.group(4) != "C":
            continue  # a definition (static inline) exports nothing
        path = m.group(1)
        full = os.path.realpath(path if os.path.isabs(path) else os.path.join(root, path))
        if full != target:
            continue
        name = re.search(r"\b(\w+)\s*\(", m.group(5))
        if name:
            names.add(name.group(1))
    return names


def htp_api_functions(root, header):
    with open(os.path.join(root, header), encoding="utf-8") as f:
        text = f.read()
    return set(re.findall(r"\bHTP_API\b[^;{]*?\b(htp_\w+)\s*\(", text))


def exported(nm, library):
    out = subprocess.run([nm, "-D", "--defined-only", library], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            names.add(fields[2].split("@")[0])
    return names - LINKER_SYMBOLS


def lowering_names(root, path):
    """The runtime functions the lowering calls: literal names, and the bases
    it completes with the element type (opEntryPoint: _f32 or _bf16)."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        text = f.read()
    bases = set(re.findall(r'opEntryPoint\(\s*"(htp_\w+)"', text))
    names = {f"{b}_{t}" for b in bases for t in ("f32", "bf16")}
    for name in re.findall(r'"(htp_\w+)"', text):
        if name not in bases:
            names.add(name)
    return names


def main():
    p = argparse.ArgumentParser(description="libhtprt's public headers and exports")
    p.add_argument("--nm", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--cc", required=True)
    p.add_argument("--cxx", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--embedding", required=True, help="the embedding API header")
    p.add_argument("--abi", required=True, help="the compiled-code ABI header (ops, hooks)")
    p.add_argument("--header", action="append", default=[], help="another public header")
    p.add_argument("--lowering", required=True)
    a = p.parse_args()
    headers = [a.embedding, a.abi] + a.header
    public_headers = set(headers)
    errors = []

    # 1. Each header on its own, as C and as C++; no private includes.
    for header in headers:
        for compiler, lang, std in ((a.cc, "c", "c11"), (a.cxx, "c++", "c++17")):
            r = compile_alone(compiler, lang, std, a.root, header, [])
            if r.returncode != 0:
                errors.append(f"{header} does not compile on its own as {lang} ({std}):\n"
                              f"{r.stderr.strip()}")
        allowed = public_headers | (ABI_EXTRA_INCLUDES if header == a.abi else set())
        for inc in sorted(project_includes(a.cc, a.root, header) - allowed):
            errors.append(f"{header} includes a header that is not public: {inc}")

    # 2. What each header declares is exported, and written with HTP_API.
    symbols = exported(a.nm, a.library)
    declared_in = {}
    for header in headers:
        decls = declared_functions(a.cc, a.root, header)
        if not decls:
            errors.append(f"{header} declares no function (is the path right?)")
        for name in sorted(decls - htp_api_functions(a.root, header)):
            errors.append(f"{header} declares {name} without HTP_API")
        for name in decls:
            declared_in.setdefault(name, set()).add(header)
    for name in sorted(set(declared_in) - symbols):
        errors.append(f"declared in {', '.join(sorted(declared_in[name]))} but not exported: "
                      f"{name}")

    # 3. Nothing else is exported.
    for name in sorted(symbols - set(declared_in)):
        kind = "a private htp__ helper" if name.startswith("htp__") else "not public"
        errors.append(f"exported but {kind} (declared in no public header): {name}")

    # 4. The audiences.
    for name, where in sorted(declared_in.items()):
        if re.match(r"htp_(op|rt)_", name) and where != {a.abi}:
            errors.append(f"{name} (compiled-code ABI) is declared in {', '.join(sorted(where))}, "
                          f"not in {a.abi} alone")

    # 5. What compiled blocks call by name.
    called = lowering_names(a.root, a.lowering)
    if not called:
        errors.append(f"no runtime function names found in {a.lowering}")
    for name in sorted(called):
        # The collectives a block calls are the embedding API's.
        home = a.embedding if name.startswith(("htp_allreduce_", "htp_group_")) else a.abi
        if home not in declared_in.get(name, set()):
            errors.append(f"the lowering calls {name}, which {home} does not declare")
        if name not in symbols:
            errors.append(f"the lowering calls {name}, which is not exported")

    for e in errors:
        print(e)
    counts = ", ".join(f"{h}: {sum(1 for w in declared_in.values() if h in w)}" for h in headers)
    print(f"{len(symbols)} symbols exported; functions declared: {counts}; "
          f"{len(called)} called by the lowering")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

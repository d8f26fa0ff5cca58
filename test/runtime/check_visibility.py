#!/usr/bin/env python3
# test/runtime/check_visibility.py - libhtprt exports exactly its public API.
#
#   check_visibility.py NM SHARED_OBJECT HEADER...
#
# Every function a header declares with HTP_API must be exported by the
# shared object, and no other htp* symbol may be: libhtprt is compiled with
# -fvisibility=hidden, so private helpers (htp__*, the unit tables, the
# imputer, the migration) stay inside. Exit 0, or 1 naming the offenders.
import re
import subprocess
import sys


def declared(headers):
    names = set()
    for path in headers:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        names.update(re.findall(r"\bHTP_API\b[^;{]*?\b(htp_\w+)\s*\(", text))
    return names


def exported(nm, library):
    out = subprocess.run([nm, "-D", "--defined-only", library], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("htp"):
            names.add(fields[2])
    return names


def main():
    if len(sys.argv) < 4:
        print(__doc__ or "usage: check_visibility.py NM SHARED_OBJECT HEADER...", file=sys.stderr)
        return 2
    nm, library, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
    public, symbols = declared(headers), exported(nm, library)
    if not public:
        print("no HTP_API declarations found in", headers, file=sys.stderr)
        return 1
    missing, leaked = sorted(public - symbols), sorted(symbols - public)
    for name in missing:
        print("declared HTP_API but not exported:", name)
    for name in leaked:
        print("exported but not public:", name)
    # The names compiled blocks resolve from the process must be among them:
    # the collective, the balance hooks (forward and backward) and the op
    # entry points (DESIGN §6).
    ops = [f"htp_op_{op}_{dtype}" for dtype in ("f32", "bf16")
           for op in ("linear", "layer_norm", "gelu", "add", "bias_add", "attention")]
    for name in ["htp_allreduce_sum_f32", "htp_allreduce_sum_bf16", "htp_rt_attention_f32",
                 "htp_rt_mlp_f32", "htp_rt_attention_grad_f32", "htp_rt_mlp_grad_f32",
                 "htp_op_copy"] + ops:
        if name not in symbols:
            print("compiled blocks need", name, "exported")
            missing.append(name)
    print(f"{len(symbols)} htp symbols exported, {len(public)} declared public")
    return 1 if missing or leaked else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# scripts/fetch-cutlass.sh - CUTLASS's headers for HTP_CUDA_GEMM=cutlass
# (kernels/cuda/linear_sm90.cu): PyPI's nvidia-cutlass wheel, its SHA-256
# pinned, unpacked once into .cutlass/VERSION/ (include/ and
# tools/util/include/). Prints the include folder to pass as
# -DHTP_CUTLASS_DIR; exits 1, saying why on stderr, where it cannot (no
# network, a wheel that does not match). Used by scripts/setup.sh (where
# nvcc is) and scripts/gpu-bundle.sh.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=4.2.0.0
sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
dir=$root/.cutlass/$version
die() { echo "fetch-cutlass: $*" >&2; exit 1; }

if [ ! -f "$dir/include/cutlass/cutlass.h" ]; then
  echo "fetch-cutlass: CUTLASS $version's headers (nvidia-cutlass, PyPI) into $dir" >&2
  wheels=$(mktemp -d) || die "mktemp failed"
  trap 'rm -rf "$wheels" "$dir.new"' EXIT
  /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps \
    --only-binary :all: -d "$wheels" "nvidia-cutlass==$version" >&2 ||
    die "cannot download nvidia-cutlass==$version"
  wheel=$(ls "$wheels"/*.whl)
  echo "$sha256  $wheel" | sha256sum -c --quiet >&2 ||
    die "nvidia-cutlass $version's wheel does not have the pinned SHA-256"
  /usr/bin/python3 - "$wheel" "$dir.new" <<'UNPACK' || die "cannot unpack $wheel"
import os, sys, zipfile
wheel, dest = sys.argv[1:]
prefix = "cutlass_library/source/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        rest = name[len(prefix):] if name.startswith(prefix) else ""
        if (rest.startswith("include/") or rest.startswith("tools/util/include/")) and not name.endswith("/"):
            target = os.path.join(dest, rest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as out:
                out.write(src.read())
UNPACK
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")" && mv "$dir.new" "$dir" || die "cannot create $dir"
fi
echo "$dir/include"

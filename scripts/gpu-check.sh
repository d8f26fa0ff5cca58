#!/usr/bin/env bash
# scripts/gpu-check.sh [OUT_DIR] - the GPU validation (issues 7, 8 and 23): one
# check, in order of evidence, under one deadline, for a device machine lent
# for 15 minutes (start included). Here first: scripts/gpu-bundle.sh; there:
#   run(command="scripts/gpu-check.sh", carry=["gpu-bundle"], timeout_s=360)
# so that a rerun still fits.
#
# It uses the carried gpu-bundle/ as it is (GPU_CHECK_BUNDLE overrides):
# binaries built here for sm_90 with their libraries beside them, compiled
# blocks in gpu-bundle/blocks. CUDA, cuBLAS and NCCL come from this machine:
# torch's nvidia/*/lib wheels first, then /usr/local/cuda, put on
# LD_LIBRARY_PATH. Only a binary that is missing or does not resolve its
# libraries is built, from source, in build-gpu-check/ (GPU_CHECK_BUILD),
# against the bundle's libraries and headers; nothing carried is deleted.
# Without a bundle the blocks are looked for in gpu-blocks/ (GPU_CHECK_BLOCKS).
#
# Steps, each given min(its cap, the time left before the deadline), the rest
# skipped once the deadline is near:
#   device            GPU, driver, torch, where each CUDA library comes from,
#                     ldd of every binary, the bundle's manifest and whether it
#                     was built from these sources (device.txt)
#   build             only if a binary is missing (cap 240 s)
#   kernels.cuda, kernels.train_cuda
#                     the CUDA kernel tests with HTP_REQUIRE_GPU=1: a skip
#                     fails (there is a GPU) (cap 90 s and 60 s)
#   blocks            bench/gpu_block.py on ViT-B/16 f32 and ViT-L/16 bf16
#                     tp 1: htp-run --device cuda timed, --check against the
#                     same .so on the CPU, and on timm's Block's weights
#                     against that Block in float64; timm eager, the GEMM
#                     bound (blocks.csv) (cap 100 s)
#   compile           the same for ViT-L/16 bf16 with torch.compile (a row
#                     added to blocks.csv; the 1.3x eager and 1.0x compile
#                     targets) (cap 90 s)
#   profile           htp-run --profile on ViT-L/16 bf16 tp 1: each call of
#                     the block (layer norms, attention, linears, adds) timed
#                     in place on the GPU, its median over 10 iterations
#                     (where the block's time goes, beside timm) (cap 30 s)
#   policies          bench/gpu_policies.py: tp 4 on one GPU, rank 0 on 8 SMs,
#                     the others on 24 (--sms); every policy (40 iterations), and
#                     semi without a straggler (trace_semi.png), the block
#                     split unevenly for the straggler (shares 1,3,3,3: none
#                     and semi); each policy's output against the tp-1
#                     block's, same seed (none, migrate, semi and the shares
#                     rows within 1e-5 where the last plan pruned nothing);
#                     semi once more under --profile: each rank's hooks,
#                     collectives (the first layer norm's shared rows too)
#                     and replicated work (none left in a ViT block),
#                     rank 0's excess of the last against SEMI's excess
#                     over the ideal (cap 80 s)
#   policies.bf16     the same for ViT-L/16 bf16 at tp 4 (the bf16 hooks):
#                     none, resize, migrate and semi, outputs against the
#                     tp-1 bf16 block within 2e-2 (cap 80 s)
#   train             htp-run --train on blocks/vit_fmnist_tp1.so with
#                     blocks/train (2048/512 Fashion-MNIST images), 2 epochs of
#                     32 steps, --seed 1, --device cpu then cuda (cap
#                     GPU_CHECK_TRAIN_S, default 60 s, each). Passes if both
#                     finish and every epoch's train and test loss are within
#                     GPU_CHECK_TRAIN_RTOL (1e-4) relative and the test
#                     accuracy within GPU_CHECK_TRAIN_ACC_POINTS (1 point) of
#                     the CPU's. Why 1e-4: on the CPU, OpenBLAS against the
#                     plain C GEMM moves the losses by 1e-8 after the 64 steps
#                     and all weights perturbed by 1e-5 relative by 5e-7,
#                     whereas a 1 % larger learning rate moves them by up to
#                     8e-4, no weight decay by 3e-4, another seed by 3e-2
#   train-balanced    the same model split over 2 ranks with spare room
#                     (blocks/vit_fmnist_tp2_spare.so), rank 1 3x slower,
#                     --policy migrate --repartition 2 on the GPU (the checked
#                     device in a dry run): the balanced backward and the
#                     re-partition on a device. Passes if the losses and
#                     accuracy are the train step's CPU ones within its
#                     tolerances and it re-partitioned (cap GPU_CHECK_TRAIN_S)
#   runtime.nccl      the nccl backend's test, one rank, HTP_REQUIRE_GPU=1
#                     (cap 45 s)
#   kernels           htp-bench-cuda: every CUDA kernel at ViT-B/16 shapes
#                     (batch 8), then at ViT-L/16's (batch 64, the blocks
#                     step's shape), against the device's bound (cap 45 s)
#   precision.tf32, precision.bf16
#                     the blocks step for ViT-B/16 f32 with --matmul-precision
#                     tf32 and bf16 (its linears on TF32 / bf16 operands,
#                     cuBLAS's FAST_TF32 / FAST_16BF; their first GPU run):
#                     timed, --check against the CPU at the same precision,
#                     the timm check at 4e-3 / 2e-2, timm eager at PyTorch's
#                     "high" / "medium" (cap 40 s each)
#   kernels.variantsN, blocks.variantsN, bench.variantsN
#                     the paths other than the defaults, switched on by their
#                     environment variables in sets, "|" between sets
#                     (GPU_CHECK_VARIANTS, default "HTP_CUDA_GEMM=cutlass
#                     HTP_CUDA_ATTENTION=head HTP_CUDA_LAYER_NORM=warp
#                     HTP_CUDA_RESIDUAL=epilogue|HTP_CUDA_LINEAR_EPILOGUE=pass
#                     HTP_CUDA_ATTENTION=wmma": set 1 the candidates, set 2
#                     the older paths the defaults fall back to; "none"
#                     skips): per set the kernel test, and for set 1 the
#                     blocks step and the ViT-L/16 kernel benchmark, with
#                     them on
#
# OUT_DIR defaults to $OUT, else gpu-check-out/ at the top of the tree. The
# device tool brings back 8 files at most, so OUT_DIR never holds more, at any
# moment: summary.txt (a line per step, written as each ends), device.txt,
# logs.txt (every command's output, streamed: a run stopped at its limit still
# brings back what was printed), blocks.csv (a row per block as it ends),
# trace_semi.png, results.tar (CSVs, metrics, traces; replaced after each
# step through results.tar.new: tar xf results.tar).
#
# GPU_CHECK_DEADLINE_S (default 300) is the whole check's budget;
# GPU_CHECK_<STEP>_S (BUILD, TESTS, BLOCKS, COMPILE, PROFILE, PRECISION, POLICIES, TRAIN, NCCL,
# KERNELS) override the caps. GPU_CHECK_DRY=1 runs everything that needs no
# GPU: the environment, the ldd report, the bundle's checks, a build of what
# is missing, the tests' and the benchmark's no-GPU paths (exit 77), a
# compiled block and the training step on the CPU, each htp-run GPU command up
# to the GPU (exit 1 with CUDA's error, not 2 for its command line), and the
# Python steps with --dry-run: a way to try the bundle where there is no GPU.
# Exits 0 if every step ran and passed, 1 if one failed, 3 if none failed but
# some were skipped at the deadline, 2 (at once) when there is no GPU and
# GPU_CHECK_DRY is not set.
set -uo pipefail
. "$(dirname "$0")/args.sh"
htp_script_args gpu-check "scripts/gpu-check.sh [OUT_DIR]" 1 "$@"
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$root/gpu-check-out}}
mkdir -p "$out" || { echo "gpu-check: cannot create $out" >&2; exit 1; }
out=$(cd "$out" && pwd)
dry=${GPU_CHECK_DRY:-0}
[ "$dry" = 0 ] && dry=
deadline=${GPU_CHECK_DEADLINE_S:-300}
t_end=$((SECONDS + deadline))
reserve=5 # for the last summary line and archive
python=${GPU_CHECK_PYTHON:-python3}
bundle=${GPU_CHECK_BUNDLE:-$root/gpu-bundle}
build=${GPU_CHECK_BUILD:-$root/build-gpu-check}
export PYTHONUNBUFFERED=1
export PATH=$PATH:/usr/local/cuda/bin:/sbin:/usr/sbin
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

ours=(summary.txt device.txt logs.txt blocks.csv trace_semi.png results.tar results.tar.new)
for f in "${ours[@]}"; do rm -f "$out/$f"; done
: >"$out/summary.txt"
: >"$out/logs.txt"
failed=0
late=0 # steps skipped at the deadline

# summary NAME STATUS DETAIL: one line; STATUS ok | FAILED | skipped | dry.
summary() {
  printf '%-18s %-7s %s\n' "$1" "$2" "$3" | tee -a "$out/summary.txt"
  [ "$2" = FAILED ] && failed=$((failed + 1))
  return 0
}
# At most 8 files may come back; the layout above keeps 7 at most.
count_warned=
check_out_count() {
  local n
  n=$(find "$out" -type f | wc -l)
  if [ "$n" -gt 8 ] && [ -z "$count_warned" ]; then
    count_warned=1
    summary outfiles FAILED "$out holds $n files: the device tool brings back 8 ($(ls "$out" | paste -sd' '))"
  fi
}
# save FILE... (under $work): into results.tar, replaced whole so that a kill
# leaves the last complete archive.
save() {
  local files=()
  for f in "$@"; do [ -e "$work/$f" ] && files+=("$f"); done
  [ "${#files[@]}" -gt 0 ] || return 0
  if [ -f "$out/results.tar" ]; then
    cp "$out/results.tar" "$out/results.tar.new"
  else
    tar -cf "$out/results.tar.new" -T /dev/null
  fi
  tar -rf "$out/results.tar.new" -C "$work" "${files[@]}" >>"$out/logs.txt" 2>&1 &&
    mv -f "$out/results.tar.new" "$out/results.tar"
  check_out_count
}
finish() {
  local line rc=0
  if [ "$failed" -eq 0 ]; then
    line="gpu-check: all steps that ran passed"
  else
    line="gpu-check: $failed step(s) FAILED"
    rc=1
  fi
  if [ "$late" -gt 0 ]; then
    line+=", $late skipped at the deadline"
    [ "$rc" -eq 0 ] && rc=3
  fi
  echo "$line (${SECONDS}s of ${deadline}s); files in $out" | tee -a "$out/summary.txt"
  check_out_count
  exit "$rc"
}

# cap STEP DEFAULT: the step's own limit (GPU_CHECK_STEP_S overrides).
cap() {
  local var=GPU_CHECK_$1_S
  echo "${!var:-$2}"
}
# budget NAME CAP: sets $limit to min(CAP, time left), or records the step as
# skipped and fails when less than 5 s are left.
budget() {
  local left=$((t_end - SECONDS - reserve))
  if [ "$left" -lt 5 ]; then
    summary "$1" skipped "the ${deadline}s deadline is reached"
    late=$((late + 1))
    return 1
  fi
  limit=$(($2 < left ? $2 : left))
}
# run_logged NAME LIMIT COMMAND...: the command under timeout, its output
# streamed into logs.txt (and $work/NAME.log for the summary); its status.
run_logged() {
  local name=$1 lim=$2 t0=$SECONDS rc
  shift 2
  printf '\n==== %s at %ss (limit %ss)\n$ %s\n' "$name" "$SECONDS" "$lim" "$*" >>"$out/logs.txt"
  timeout -k 5 "$lim" "$@" 2>&1 | tee "$work/$name.log" >>"$out/logs.txt"
  rc=${PIPESTATUS[0]}
  printf '==== %s: exit %s after %ss\n' "$name" "$rc" "$((SECONDS - t0))" >>"$out/logs.txt"
  return "$rc"
}
# dry_gpu NAME COMMAND...: in a dry run, an htp-run GPU command must get as
# far as the GPU (exit 1 with CUDA's error), not stop at its command line or
# at loading the block (exit 2, or an error that does not name CUDA).
dry_gpu() {
  local name=$1 rc
  shift
  budget "$name" 60 || return
  run_logged "$name" "$limit" "$@"
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q 'cuda: ' "$work/$name.log"; then
    summary "$name" dry "reached the GPU and stopped there: $(grep -m1 -o 'cuda: .*' "$work/$name.log" | cut -c1-100)"
  else
    summary "$name" FAILED "exit $rc before reaching the GPU (logs.txt)"
  fi
}
# dry_script NAME COMMAND...: a Python step with --dry-run: its arguments
# checked and the htp-run commands it would run printed.
dry_script() {
  local name=$1 rc
  shift
  budget "$name" 30 || return
  run_logged "$name" "$limit" "$@" --dry-run
  rc=$?
  if [ "$rc" -eq 0 ]; then
    local listed commands
    listed=$(sed -n 's/^dry run: \([^ ]*\) .*: /\1: /p' "$work/$name.log" | paste -sd';' -)
    commands=$(grep -c '^\$ ' "$work/$name.log")
    [ "$commands" -gt 0 ] && listed="${listed:+$listed; }$commands htp-run command(s) printed"
    summary "$name" dry "--dry-run passed: $listed (logs.txt)"
  else
    summary "$name" FAILED "--dry-run exited $rc (logs.txt)"
  fi
}
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }

# --- Is there a GPU? ------------------------------------------------------------
gpu=
if command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  gpu=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | head -1)
fi
if [ -z "$gpu" ] && [ -z "$dry" ]; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi missing or lists none): nothing to check." \
       "Run this on a machine with a GPU, or GPU_CHECK_DRY=1 to try the bundle without one." |
    tee -a "$out/summary.txt" >&2
  exit 2
fi
[ -n "$dry" ] && [ -n "$gpu" ] && echo "gpu-check: dry run although a GPU is present ($gpu)" >>"$out/summary.txt"

# --- CUDA's libraries: torch's wheels, then the toolkit ----------------------------
lib_dirs=()
add_dir() {
  local d
  [ -d "$1" ] || return 0
  for d in "${lib_dirs[@]}"; do [ "$d" = "$1" ] && return 0; done
  lib_dirs+=("$1")
}
if command -v "$python" >/dev/null 2>&1; then
  while read -r d; do add_dir "$d"; done < <(timeout 30 "$python" - 2>/dev/null <<'WHEELS'
import glob, os
try:
    import nvidia  # a namespace package: one folder per installed nvidia-* wheel
except ImportError:
    raise SystemExit
wanted = ("libcudart.so.*", "libcublas.so.*", "libcublasLt.so.*", "libnccl.so.*")
for base in nvidia.__path__:
    for folder in sorted(glob.glob(os.path.join(base, "*", "lib"))):
        if any(glob.glob(os.path.join(folder, name)) for name in wanted):
            print(folder)
WHEELS
  )
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 \
         /usr/local/nvidia/lib; do
  add_dir "$d"
done
# provider SONAME: the folder ld.so should take it from (the candidates above
# in order, then what LD_LIBRARY_PATH already names), or "ldconfig", or nothing.
provider() {
  local d inherited=()
  IFS=: read -ra inherited <<<"${LD_LIBRARY_PATH:-}"
  for d in "${lib_dirs[@]}" "${inherited[@]}"; do
    [ -n "$d" ] && [ -e "$d/$1" ] && { echo "$d"; return; }
  done
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 " && echo ldconfig
}
# Our binaries get only the folders that provide what they need, first; the
# Python steps keep their own environment (torch resolves its wheels itself,
# and a toolkit folder first on its path could hand it another cuDNN).
needed_libs=(libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2)
ld_dirs=()
for so in "${needed_libs[@]}"; do
  d=$(provider "$so")
  case $d in ""|ldconfig) continue ;; esac
  case " ${ld_dirs[*]} " in *" $d "*) ;; *) ld_dirs+=("$d") ;; esac
done
ld_path=$(IFS=:; echo "${ld_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
libenv=(env "LD_LIBRARY_PATH=$ld_path")

# --- Binaries: the bundle's, else built ------------------------------------------
declare -A bin build_path
# Execute bits may not survive every copy; the files are ours to fix.
[ -d "$bundle/bin" ] && chmod u+x "$bundle"/bin/* 2>/dev/null
names=()
while read -r name path; do
  names+=("$name")
  build_path[$name]=$path
  [ -x "$bundle/bin/$name" ] && bin[$name]=$bundle/bin/$name
done < <("$root/scripts/gpu-bundle.sh" --targets)
# A binary whose libraries do not all resolve here is as good as missing.
missing=()
for name in "${names[@]}"; do
  if [ -z "${bin[$name]:-}" ] || "${libenv[@]}" ldd "${bin[$name]}" 2>&1 | grep -q 'not found'; then
    missing+=("$name")
  fi
done
blocks=${GPU_CHECK_BLOCKS:-}
if [ -z "$blocks" ]; then
  blocks=$bundle/blocks
  [ -f "$blocks/blocks.txt" ] || blocks=$root/gpu-blocks
fi

# --- 1. Device, environment, ldd -----------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')${dry:+ (dry run)}"
  echo "tree: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo 'unknown (no git)')"
  echo "host: $(uname -srm), $(nproc) cores, $(ldd --version 2>/dev/null | head -1)"
  echo "deadline: ${deadline}s"
  echo
  if [ -n "$gpu" ]; then
    timeout 20 nvidia-smi
    echo
    timeout 20 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  else
    echo "no GPU (nvidia-smi missing or lists none)"
  fi
  echo
  command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -2
  command -v cmake >/dev/null 2>&1 && cmake --version | head -1
  # One interpreter: importing torch costs seconds.
  timeout 40 "$python" - 2>&1 <<'VERSIONS' | tail -2
import sys
print("python", sys.version.split()[0], sys.executable)
try:
    import torch, timm
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          "timm", timm.__version__)
except ImportError as error:
    print("no", error.name)
VERSIONS
  echo
  echo "== bundle: $bundle"
  if [ -f "$bundle/MANIFEST.txt" ]; then
    sed -n '1,/^$/p' "$bundle/MANIFEST.txt"
    now=$("$root/scripts/gpu-bundle.sh" --fingerprint)
    if grep -q "^fingerprint: $now\$" "$bundle/MANIFEST.txt"; then
      echo "sources: the same as the bundle's (fingerprint $now)"
    else
      echo "sources: DIFFERENT from the bundle's (fingerprint $now here): the bundle is stale"
    fi
  else
    echo "no bundle (no $bundle/MANIFEST.txt): built here where needed"
  fi
  echo "blocks: $blocks"
  echo
  echo "== CUDA libraries (candidates in order: ${lib_dirs[*]:-none})"
  for so in "${needed_libs[@]}" libnccl.so; do
    echo "  $so: $(provider "$so")"
  done
  echo "LD_LIBRARY_PATH for the binaries: $ld_path"
  for name in "${names[@]}"; do
    echo
    echo "== ldd ${bin[$name]:-$name (not in the bundle)}"
    [ -n "${bin[$name]:-}" ] && "${libenv[@]}" ldd "${bin[$name]}" 2>&1
  done
} >"$out/device.txt" 2>&1
stale=$(grep -q "the bundle is stale" "$out/device.txt" && echo ", bundle STALE: built from other sources")
if [ "${#missing[@]}" -eq 0 ]; then
  summary device ok "${gpu:-no GPU (dry run)}; bundle binaries resolve$stale (device.txt)"
else
  summary device ok "${gpu:-no GPU (dry run)}; to build: ${missing[*]}$stale (device.txt)"
fi
missing_cuda=$(for so in "${needed_libs[@]}"; do
                 [ -n "$dry" ] && [ "$so" = libcuda.so.1 ] && continue # no driver without a GPU
                 [ -n "$(provider "$so")" ] || echo -n "$so "; done)
[ -n "$missing_cuda" ] && summary cuda-libs FAILED "not found here: $missing_cuda(device.txt)"
check_out_count

# --- 2. Build what is missing (never deletes a build) ---------------------------------
if [ "${#missing[@]}" -gt 0 ]; then
  arch=$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [[ $arch =~ ^[0-9]+$ ]] || arch=90
  nvcc_path=$(command -v nvcc || true)
  generator=()
  command -v ninja >/dev/null 2>&1 && [ ! -f "$build/Makefile" ] && generator=(-G Ninja)
  config=(-DCMAKE_BUILD_TYPE=Release -DHTP_ENABLE_MLIR=OFF -DHTP_ENABLE_CUDA=ON -DHTP_ENABLE_MPI=OFF
          -DCMAKE_CUDA_ARCHITECTURES="$arch" ${nvcc_path:+-DCMAKE_CUDA_COMPILER="$nvcc_path"})
  # The bundle's libraries and headers stand in for what this machine lacks.
  inc=$bundle/include
  [ -f "$bundle/bin/libjansson.so.4" ] && [ -f "$inc/jansson.h" ] &&
    config+=(-DHTP_JANSSON="$bundle/bin/libjansson.so.4" -DHTP_JANSSON_INCLUDE="$inc")
  [ -f "$bundle/bin/libopenblas.so.0" ] && [ -f "$inc/cblas.h" ] &&
    config+=(-DHTP_OPENBLAS="$bundle/bin/libopenblas.so.0" -DHTP_OPENBLAS_INCLUDE="$inc")
  [ -f "$bundle/bin/libcmocka.so.0" ] && [ -f "$inc/cmocka.h" ] &&
    config+=(-DHTP_CMOCKA="$bundle/bin/libcmocka.so.0" -DHTP_CMOCKA_INCLUDE="$inc")
  # NCCL by its SONAME: torch's wheel has no libnccl.so for find_library.
  nccl_dir=$(provider libnccl.so.2)
  [ "$nccl_dir" = ldconfig ] &&
    nccl_dir=$(dirname "$(ldconfig -p | awk '$1 == "libnccl.so.2" {print $NF; exit}')")
  nccl_inc=
  for d in "$nccl_dir/../include" /usr/local/cuda/include /usr/include "$inc"; do
    [ -f "$d/nccl.h" ] && { nccl_inc=$d; break; }
  done
  [ -n "$nccl_dir" ] && [ -n "$nccl_inc" ] &&
    config+=(-DHTP_NCCL="$nccl_dir/libnccl.so.2" -DHTP_NCCL_INCLUDE="$nccl_inc")
  # Then OpenBLAS off, then kernels only, should the configuration fail.
  fallbacks=("" "-DHTP_WITH_OPENBLAS=OFF" "-DHTP_WITH_OPENBLAS=OFF -DHTP_KERNELS_ONLY=ON")
  # A dry run builds too: it needs no GPU.
  if ! command -v cmake >/dev/null 2>&1 || [ -z "$nvcc_path" ]; then
    summary build FAILED "missing ${missing[*]} and no cmake or nvcc to build them"
  elif budget build "$(cap BUILD 240)"; then
    configured=
    if [ -f "$build/CMakeCache.txt" ]; then
      configured=existing
    else
      for extra in "${fallbacks[@]}"; do
        # shellcheck disable=SC2086 # extra is a list of flags
        if run_logged configure "$limit" cmake -S "$root" -B "$build" "${generator[@]}" "${config[@]}" $extra; then
          configured=${extra:-full}
          break
        fi
        rm -f "$build/CMakeCache.txt" # only the cache: the next try reconfigures
      done
    fi
    left=$((t_end - SECONDS - reserve))
    if [ -z "$configured" ]; then
      summary build FAILED "no configuration worked (logs.txt)"
    elif [ "$left" -lt 5 ]; then
      summary build skipped "configured ($configured); the deadline is reached"
    else
      targets=()
      for name in "${missing[@]}"; do
        grep -q "^build $name:\|^$name:" "$build/build.ninja" "$build/Makefile" 2>/dev/null && targets+=("$name")
      done
      [ "${#targets[@]}" -gt 0 ] || targets=("${missing[@]}")
      run_logged build "$((limit < left ? limit : left))" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
      rc=$?
      built=()
      for name in "${missing[@]}"; do
        if [ -x "$build/${build_path[$name]}" ]; then bin[$name]=$build/${build_path[$name]}; built+=("$name"); fi
      done
      if [ "$rc" -eq 0 ]; then
        summary build ok "${built[*]} in $build ($configured configuration) (logs.txt)"
      else
        summary build FAILED "exit $rc$(timed_out "$rc" && echo ' (time limit)'); built: ${built[*]:-none} (logs.txt)"
      fi
    fi
  fi
fi

# gpu_test NAME BINARY CAP [VAR=VALUE...]: a CUDA test; with a GPU it must pass
# (HTP_REQUIRE_GPU=1), in a dry run it must skip (77) after its no-GPU checks.
gpu_test() {
  local name=$1 binary=${bin[$2]:-} step_cap=$3
  shift 3
  if [ -z "$binary" ]; then
    summary "$name" FAILED "no $name binary (device.txt)"
    return
  fi
  budget "$name" "$step_cap" || return
  if [ -n "$dry" ]; then
    run_logged "$name" "$limit" "${libenv[@]}" "$@" "$binary"
    local rc=$?
    if [ "$rc" -eq 77 ]; then
      summary "$name" dry "no GPU: skipped (77) after its no-GPU checks; would run with HTP_REQUIRE_GPU=1"
    else
      summary "$name" FAILED "exit $rc without a GPU, expected 77 (logs.txt)"
    fi
    return
  fi
  run_logged "$name" "$limit" "${libenv[@]}" HTP_REQUIRE_GPU=1 "$@" "$binary"
  local rc=$?
  if [ "$rc" -eq 0 ]; then
    summary "$name" ok "passed: $(grep -v '^ *$' "$work/$name.log" | tail -1 | cut -c1-120) (logs.txt)"
  elif [ "$rc" -eq 77 ]; then
    summary "$name" FAILED "skipped (77) although a GPU is present (logs.txt)"
  elif timed_out "$rc"; then
    summary "$name" FAILED "stopped at its ${limit}s limit (logs.txt)"
  else
    summary "$name" FAILED "exit $rc: $(grep -m1 -E 'FAIL|error' "$work/$name.log" | cut -c1-140) (logs.txt)"
  fi
}

# --- 3. CUDA kernel tests (as ctest's kernels.cuda, kernels.train_cuda) -------------
gpu_test kernels.cuda test_kernels_cuda "$(cap TESTS 90)"
# As ctest runs it: its CPU references single-threaded.
gpu_test kernels.train_cuda test_train_cuda "$(cap TESTS 60)" OPENBLAS_NUM_THREADS=1
check_out_count

# htp-run behind a wrapper that gives it the CUDA folders, for the Python
# steps (which keep their own LD_LIBRARY_PATH). Its CPU runs (--check, the
# training step's) keep OpenBLAS's default threads: one per core.
htp_run=
if [ -n "${bin[htp-run]:-}" ]; then
  htp_run=$work/htp-run
  printf '#!/bin/sh\nexec env %q %q "$@"\n' "LD_LIBRARY_PATH=$ld_path" "${bin[htp-run]}" >"$htp_run"
  chmod +x "$htp_run"
fi
have_python=
command -v "$python" >/dev/null 2>&1 && have_python=1

# --- 4. Blocks against the CPU and timm --------------------------------------------
block_cmd=("$python" "$root/bench/gpu_block.py" --htp-run "$htp_run" --blocks "$blocks"
           --csv "$out/blocks.csv" --iters 20 --warmup 3)
if [ -z "$htp_run" ]; then
  summary blocks FAILED "no htp-run"
elif [ ! -f "$blocks/vit_b16_f32_tp1.so" ] || [ ! -f "$blocks/vit_l16_bf16_tp1.so" ]; then
  summary blocks skipped "no vit_b16_f32_tp1.so / vit_l16_bf16_tp1.so in $blocks (scripts/gpu-bundle.sh)"
elif [ -n "$dry" ]; then
  # What runs without a GPU: the bundled htp-run on a compiled block, on the CPU.
  if budget blocks-cpu 60; then
    run_logged blocks-cpu "$limit" "$htp_run" "$blocks/vit_b16_f32_tp1.so" --device cpu --iters 1 --warmup 0 --profile
    rc=$?
    if [ "$rc" -eq 0 ]; then
      summary blocks-cpu dry "the bundled htp-run ran vit_b16_f32_tp1.so on the CPU: $(grep -m1 -E '^median' "$work/blocks-cpu.log" | cut -c1-100)"
    else
      summary blocks-cpu FAILED "the bundled htp-run on vit_b16_f32_tp1.so, CPU: exit $rc (logs.txt)"
    fi
  fi
  dry_gpu blocks-cuda "$htp_run" "$blocks/vit_l16_bf16_tp1.so" --device cuda --iters 1 --warmup 0 --check --report json
  dry_script blocks "${block_cmd[@]}" --only vit_b16_f32_tp1,vit_l16_bf16_tp1 --timm-check --no-compile
  dry_script compile "${block_cmd[@]}" --only vit_l16_bf16_tp1 --no-check --append
  dry_gpu profile "$htp_run" "$blocks/vit_l16_bf16_tp1.so" --device cuda --iters 1 --warmup 0 --profile
elif [ -z "$have_python" ]; then
  summary blocks skipped "no $python"
else
  if budget blocks "$(cap BLOCKS 100)"; then
    run_logged blocks "$limit" "${block_cmd[@]}" --timeout "$limit" \
      --only vit_b16_f32_tp1,vit_l16_bf16_tp1 --timm-check --no-compile
    rc=$?
    # Per block: the times, the CPU check, the comparison with timm.
    rows=$( (grep -E '^gpu_block: ' "$work/blocks.log" | cut -c1-120
             grep '^row ' "$work/blocks.log" | tr ' ' '\n' | awk -F= '
               $1 == "block" { if (line) print line; line = $2 }
               $1 == "htp_ms" || $1 == "eager_ms" || $1 == "check_error" || $1 == "timm_error" { line = line " " $1 "=" $2 }
               END { if (line) print line }') | paste -sd';' -)
    case $rc in
      0) summary blocks ok "$rows (blocks.csv)" ;;
      77) summary blocks skipped "$(tail -1 "$work/blocks.log")" ;;
      *) summary blocks FAILED "exit $rc$(timed_out "$rc" && echo " at the ${limit}s limit"): $rows (logs.txt)" ;;
    esac
  fi
  if budget compile "$(cap COMPILE 90)"; then
    run_logged compile "$limit" "${block_cmd[@]}" --timeout "$limit" \
      --only vit_l16_bf16_tp1 --no-check --append
    rc=$?
    case $rc in
      0) summary compile ok "$(grep -m1 '^target' "$work/compile.log") (blocks.csv)" ;;
      77) summary compile skipped "$(tail -1 "$work/compile.log")" ;;
      *) summary compile FAILED "exit $rc$(timed_out "$rc" && echo " at the ${limit}s limit") (logs.txt)" ;;
    esac
  fi
  if budget profile "$(cap PROFILE 30)"; then
    run_logged profile "$limit" "$htp_run" "$blocks/vit_l16_bf16_tp1.so" --device cuda \
      --iters 10 --warmup 3 --profile
    rc=$?
    # The calls, "name ms" each (rank 0), then their sum.
    calls=$(awk '/^profile:/ { on = 1; next } on && $2 ~ /^htp_/ { sub(/^htp_(op_)?/, "", $2); printf "%s%s %s", sep, $2, $3; sep = ", " }
                 on && $1 == "all" { printf "; all calls %s ms", $3; on = 0 }' "$work/profile.log")
    if [ "$rc" -eq 0 ]; then
      summary profile ok "ViT-L/16 bf16 tp 1, median ms per call: $calls (logs.txt)"
    else
      summary profile FAILED "exit $rc$(timed_out "$rc" && echo " at the ${limit}s limit") (logs.txt)"
    fi
  fi
fi
check_out_count

# --- 5. tp 4 on one GPU, a straggler on 8 SMs, the others on 24 -----------------------
# shellcheck disable=SC2054 # the policies are one argument
policy_cmd=("$python" "$root/bench/gpu_policies.py" --htp-run "$htp_run"
            --block "$blocks/vit_b16_f32_tp4.so" --out "$work/policies" --policies none,resize,migrate,semi --iters 40)
# Every policy's output against the tp-1 block's, same seed (none, migrate, semi exact).
[ -f "$blocks/vit_b16_f32_tp1.so" ] && policy_cmd+=(--reference "$blocks/vit_b16_f32_tp1.so")
# The split redrawn for the straggler (uneven shares, issue 27): none and semi.
[ -f "$blocks/vit_b16_f32_tp4_shares.so" ] && policy_cmd+=(--shares-block "$blocks/vit_b16_f32_tp4_shares.so")
if [ -z "$htp_run" ] || [ ! -f "$blocks/vit_b16_f32_tp4.so" ]; then
  summary policies skipped "no htp-run or $blocks/vit_b16_f32_tp4.so"
elif [ -n "$dry" ]; then
  dry_script policies "${policy_cmd[@]}"
  dry_gpu policies-cuda "$htp_run" "$blocks/vit_b16_f32_tp4.so" --device cuda --tp 4 --iters 1 --warmup 1 \
    --report json --sms 0:8 --sms 1:32 --sms 2:32 --sms 3:32 --policy semi --trace "$work/dry_trace.jsonl"
elif [ -z "$have_python" ]; then
  summary policies skipped "no $python"
elif budget policies "$(cap POLICIES 80)"; then
  run_logged policies "$limit" "${policy_cmd[@]}" --timeout "$limit"
  rc=$?
  [ -f "$work/policies/trace_semi.png" ] && cp "$work/policies/trace_semi.png" "$out/trace_semi.png"
  # The outputs (ViT-B/16 at batch 64: 39 MB each, tp 1 and each policy's) were compared by the
  # step; the archive keeps the traces, compressed, under the 16 MiB a file
  # may bring back.
  rm -f "$work"/policies/*.npy
  gzip -f "$work"/policies/*.jsonl 2>/dev/null
  save policies
  if [ "$rc" -eq 0 ]; then
    summary policies ok "$(grep -m1 '^target' "$work/policies.log"); $(grep -m1 '^outputs against' "$work/policies.log" | sed 's/.*; unpruned/unpruned/'); $(grep -m1 '^replicated work' "$work/policies.log") (logs.txt, trace_semi.png)"
  else
    summary policies FAILED "exit $rc$(timed_out "$rc" && echo " at the ${limit}s limit"): $(grep -m1 -e 'gpu_policies:' -e '^outputs against' "$work/policies.log" | cut -c1-200) (logs.txt)"
  fi
fi

# --- 5b. The same for a bf16 block: ViT-L/16 at tp 4 (its bf16 hooks' first GPU run) --
# every policy against the tp-1 bf16 block under the bf16 tolerance (the
# split rounds partial sums the unsplit block never rounds): migrate and
# resize too, since SEMI here falls to one or the other per rank.
bf16_policy_cmd=("$python" "$root/bench/gpu_policies.py" --htp-run "$htp_run"
                 --block "$blocks/vit_l16_bf16_tp4.so" --out "$work/policies-bf16"
                 --policies none,resize,migrate,semi --iters 30 --tolerance 2e-2)
[ -f "$blocks/vit_l16_bf16_tp1.so" ] && bf16_policy_cmd+=(--reference "$blocks/vit_l16_bf16_tp1.so")
if [ -z "$htp_run" ] || [ ! -f "$blocks/vit_l16_bf16_tp4.so" ]; then
  summary policies.bf16 skipped "no htp-run or $blocks/vit_l16_bf16_tp4.so"
elif [ -n "$dry" ]; then
  dry_script policies.bf16 "${bf16_policy_cmd[@]}"
elif [ -z "$have_python" ]; then
  summary policies.bf16 skipped "no $python"
elif budget policies.bf16 "$(cap POLICIES 80)"; then
  run_logged policies.bf16 "$limit" "${bf16_policy_cmd[@]}" --timeout "$limit"
  rc=$?
  rm -f "$work"/policies-bf16/*.npy
  gzip -f "$work"/policies-bf16/*.jsonl 2>/dev/null
  save policies-bf16
  if [ "$rc" -eq 0 ]; then
    summary policies.bf16 ok "$(grep -m1 '^target' "$work/policies.bf16.log"); $(grep -m1 '^outputs against' "$work/policies.bf16.log" | sed 's/.*; unpruned/unpruned/'); $(grep -m1 '^replicated work' "$work/policies.bf16.log") (logs.txt)"
  else
    summary policies.bf16 FAILED "exit $rc$(timed_out "$rc" && echo " at the ${limit}s limit"): $(grep -m1 -e 'gpu_policies:' -e '^outputs against' "$work/policies.bf16.log" | cut -c1-200) (logs.txt)"
  fi
fi
check_out_count

# compare_training CPU_JSON OTHER_JSON DEVICE [REPARTITIONS]: every epoch's
# train and test loss of OTHER (htp-run --metrics, on DEVICE) relative to the
# CPU's, test accuracy in points; with REPARTITIONS, OTHER must also have
# re-partitioned at least that often. Exit 0 within tolerance, 1 outside, 2
# unreadable metrics.
compare_training() {
  timeout 30 "$python" - "$1" "$2" "$3" "${4:-0}" "${GPU_CHECK_TRAIN_RTOL:-1e-4}" \
    "${GPU_CHECK_TRAIN_ACC_POINTS:-1}" <<'COMPARE'
import json, math, sys
cpu_path, other_path, device = sys.argv[1:4]
moves, rtol, points = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
try:
    runs = [json.load(open(path)) for path in (cpu_path, other_path)]
    for run, want in zip(runs, ("cpu", device)):
        if run.get("device") != want or len(run.get("epochs", [])) != 2:
            raise ValueError(f"{want}'s metrics say device {run.get('device')}, "
                             f"{len(run.get('epochs', []))} epoch(s)")
    loss_gaps, accuracy_gaps = [], []
    for cpu, other in zip(runs[0]["epochs"], runs[1]["epochs"]):
        loss_gaps += [abs(other[key] - cpu[key]) / abs(cpu[key]) for key in ("train_loss", "test_loss")]
        accuracy_gaps.append(100 * abs(other["test_acc"] - cpu["test_acc"]))
        print(f"epoch {cpu['epoch']}: train loss {cpu['train_loss']:.6f} {other['train_loss']:.6f}, "
              f"test loss {cpu['test_loss']:.6f} {other['test_loss']:.6f}, test acc "
              f"{100 * cpu['test_acc']:.2f} {100 * other['test_acc']:.2f} % (cpu, {device})")
    repartitions = int(runs[1].get("repartitions", 0))
except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as error:
    print(f"cannot compare the metrics: {error!r}")
    sys.exit(2)
# A NaN gap is the largest and fails.
loss_gap = math.nan if any(map(math.isnan, loss_gaps)) else max(loss_gaps)
accuracy_gap = max(accuracy_gaps)
def per_epoch(run, key, scale=1, digits=4):
    return "/".join(f"{scale * epoch[key]:.{digits}f}" for epoch in run["epochs"])
print(f"train loss {per_epoch(runs[0], 'train_loss')} cpu, {per_epoch(runs[1], 'train_loss')} "
      f"{device}; test acc {per_epoch(runs[0], 'test_acc', 100, 2)} cpu, "
      f"{per_epoch(runs[1], 'test_acc', 100, 2)} {device} %; train and test loss gap "
      f"{loss_gap:.1e} relative (tol {rtol:g}), acc gap {accuracy_gap:.2f} points (tol {points:g})"
      + (f"; {repartitions} re-partition(s) (at least {moves})" if moves else ""))
sys.exit(0 if loss_gap <= rtol and accuracy_gap <= points and repartitions >= moves else 1)
COMPARE
}

# --- 6. Training on the GPU against the CPU -----------------------------------------
model=$blocks/vit_fmnist_tp1.so
train_devices=(cpu cuda)
[ -n "$dry" ] && train_devices=(cpu)
if [ ! -f "$model" ] || [ ! -d "$blocks/train" ]; then
  summary train skipped "no $model or $blocks/train (scripts/gpu-bundle.sh)"
elif [ -z "$htp_run" ]; then
  summary train FAILED "no htp-run"
elif [ -z "$have_python" ]; then
  summary train skipped "no $python to compare the metrics"
else
  status='' detail=''
  for device in "${train_devices[@]}"; do
    budget "train-$device" "$(cap TRAIN 60)" || { status=none; break; }
    rm -f "$work/train-$device.json"
    run_logged "train-$device" "$limit" "$htp_run" "$model" --train --data "$blocks/train" --epochs 2 \
      --seed 1 --device "$device" --metrics "$work/train-$device.json"
    train_rc=$?
    save "train-$device.json"
    log=$work/train-$device.log
    if grep -q 'built without zlib' "$log"; then
      status=skipped detail="htp-run was built without zlib: no --train"
    elif timed_out "$train_rc"; then
      status=FAILED detail="--device $device did not finish in ${limit}s (logs.txt)"
    elif [ "$train_rc" -ne 0 ]; then
      status=FAILED detail="--device $device exited $train_rc: $( (grep -m1 error "$log" ||
                            tail -n1 "$log") | cut -c1-140) (logs.txt)"
    fi
    [ -n "$status" ] && break
  done
  if [ -n "$dry" ] && [ -z "$status" ]; then
    summary train dry "--device cpu trained: $(tail -n1 "$work/train-cpu.log" | cut -c1-110)"
    dry_gpu train-cuda "$htp_run" "$model" --train --data "$blocks/train" --epochs 2 --seed 1 --device cuda \
      --metrics "$work/train-cuda.json"
  elif [ -z "$status" ]; then
    compare_training "$work/train-cpu.json" "$work/train-cuda.json" cuda >"$work/train.txt" 2>&1
    rc=$?
    cat "$work/train.txt" >>"$out/logs.txt"
    save train.txt
    case $rc in
      0) summary train ok "$(tail -n1 "$work/train.txt")" ;;
      1) summary train FAILED "$(tail -n1 "$work/train.txt")" ;;
      *) summary train FAILED "$(tail -n1 "$work/train.txt") (logs.txt)" ;;
    esac
  elif [ "$status" != none ]; then
    summary train "$status" "$detail"
  fi
fi
check_out_count

# --- 6b. Balanced training: a straggler's units migrate, then re-partition ------------
# The same model split over 2 ranks with spare room, rank 1 3x slower
# (--slow: waits), --policy migrate, --repartition 2: the balanced backward
# and the re-partition on the device. Migration is exact, so the losses must
# be the tp-1 CPU run's (the train step's) within its tolerance, and the run
# must have re-partitioned. A dry run runs it on the checked device.
balanced=$blocks/vit_fmnist_tp2_spare.so
balanced_device=cuda
[ -n "$dry" ] && balanced_device=checked
if [ ! -f "$balanced" ] || [ ! -d "$blocks/train" ]; then
  summary train-balanced skipped "no $balanced or $blocks/train (scripts/gpu-bundle.sh)"
elif [ -z "$htp_run" ] || [ -z "$have_python" ] || [ ! -f "$work/train-cpu.json" ]; then
  summary train-balanced skipped "no htp-run, $python or the train step's CPU metrics"
elif budget train-balanced "$(cap TRAIN 60)"; then
  rm -f "$work/train-balanced.json"
  run_logged train-balanced "$limit" "$htp_run" "$balanced" --train --data "$blocks/train" --epochs 2 \
    --seed 1 --device "$balanced_device" --policy migrate --slow 1:3 --repartition 2 \
    --metrics "$work/train-balanced.json"
  rc=$?
  save train-balanced.json
  if [ "$rc" -ne 0 ]; then
    summary train-balanced FAILED "--device $balanced_device exited $rc$(timed_out "$rc" && echo " at the ${limit}s limit"): $( (grep -m1 error "$work/train-balanced.log" || tail -n1 "$work/train-balanced.log") | cut -c1-140) (logs.txt)"
  else
    compare_training "$work/train-cpu.json" "$work/train-balanced.json" "$balanced_device" 1 \
      >"$work/train-balanced.txt" 2>&1
    rc=$?
    cat "$work/train-balanced.txt" >>"$out/logs.txt"
    case $rc in
      0) summary train-balanced ok "$(tail -n1 "$work/train-balanced.txt")" ;;
      *) summary train-balanced FAILED "$(tail -n1 "$work/train-balanced.txt") (logs.txt)" ;;
    esac
  fi
fi
check_out_count

# --- 7. NCCL, one rank ------------------------------------------------------------------
gpu_test runtime.nccl runtime_nccl_test "$(cap NCCL 45)"
check_out_count

# --- 8. Kernel benchmark ------------------------------------------------------------------
bench=${bin[htp-bench-cuda]:-}
if [ -z "$bench" ]; then
  summary kernels FAILED "no htp-bench-cuda"
elif budget kernels "$(cap KERNELS 45)"; then
  run_logged kernels "$limit" "${libenv[@]}" "$bench" --csv "$work/kernels.csv"
  rc=$?
  # Then at the ViT-L/16 block's shape, batch 64: the per-kernel split of
  # what the blocks step timed whole.
  if [ "$rc" -eq 0 ] && [ -z "$dry" ]; then
    run_logged kernels-vitl16 30 "${libenv[@]}" "$bench" --batch 64 --dim 1024 --heads 16 \
      --mlp 4096 --repeats 10 --csv "$work/kernels-vitl16.csv"
    rc=$?
    save kernels-vitl16.csv
  fi
  save kernels.csv
  if [ -n "$dry" ]; then
    if [ "$rc" -eq 77 ]; then
      summary kernels dry "no GPU: skipped (77); would time every CUDA kernel"
    else
      summary kernels FAILED "exit $rc without a GPU, expected 77 (logs.txt)"
    fi
  elif [ "$rc" -eq 0 ]; then
    summary kernels ok "$(grep -c '' "$work/kernels.csv") CSV lines; block sum $(grep '^block_sum' "$work/kernels.log" |
                        awk '{printf "%s%s %s ms", sep, $2, $3; sep = ", "}'); ViT-L/16 batch 64: $(grep '^block_sum' "$work/kernels-vitl16.log" |
                        awk '{printf "%s%s %s ms", sep, $2, $3; sep = ", "}'); $(grep '^fusions bf16' "$work/kernels-vitl16.log" | cut -c9-) (logs.txt; results.tar: kernels.csv, kernels-vitl16.csv)"
  else
    summary kernels FAILED "htp-bench-cuda exited $rc$(timed_out "$rc" && echo " at the ${limit}s limit") (logs.txt)"
  fi
fi

# --- 8b. The matmul precision: ViT-B/16 f32 with its linears on TF32 and bf16 operands --
# (--matmul-precision; their first GPU run): timm eager at PyTorch's counterpart,
# the timm check at the precision's tolerance, --check against the CPU at the
# same precision. After the established steps: new evidence runs last.
if [ -z "$htp_run" ] || [ ! -f "$blocks/vit_b16_f32_tp1.so" ]; then
  summary precision skipped "no htp-run or $blocks/vit_b16_f32_tp1.so"
elif [ -n "$dry" ]; then
  dry_script precision "${block_cmd[@]}" --only vit_b16_f32_tp1 --timm-check --no-compile --append \
    --matmul-precision bf16
elif [ -z "$have_python" ]; then
  summary precision skipped "no $python"
else
  for precision in tf32 bf16; do
    budget "precision.$precision" "$(cap PRECISION 40)" || continue
    run_logged "precision.$precision" "$limit" "${block_cmd[@]}" --timeout "$limit" \
      --only vit_b16_f32_tp1 --timm-check --no-compile --append --matmul-precision "$precision"
    rc=$?
    row=$(grep '^row ' "$work/precision.$precision.log" | tr ' ' '\n' |
          grep -E '^(htp_ms|eager_ms|x_eager|check_error|timm_error)=' | paste -sd' ' -)
    case $rc in
      0) summary "precision.$precision" ok "ViT-B/16 f32, --matmul-precision $precision: $row (blocks.csv)" ;;
      77) summary "precision.$precision" skipped "$(tail -1 "$work/precision.$precision.log")" ;;
      *) summary "precision.$precision" FAILED "exit $rc$(timed_out "$rc" && echo " at the ${limit}s limit"): $row (logs.txt)" ;;
    esac
  done
fi

# --- 9. Experiments: kernels not yet run on a GPU, switched on ------------------------
# Each switch selects a path other than the default
# (kernels/cuda/kernels_internal.h). The switches come in sets, "|" between
# sets, each set run as one: first the candidates not yet run on a GPU (the
# CUTLASS Hopper GEMM with the bias and GELU in its epilogue, the attention
# a block per image and head, the warp-a-row layer norm), each of which
# becomes the default once it passes and is faster (the linear,
# linear_gelu, attention and layer_norm rows of kernels-variants-1.csv
# against kernels-vitl16.csv); then the older paths
# the defaults fall back to for shapes they do not take (the bias pass for
# unaligned linears, WMMA for heads over 128 wide), so that those stay
# checked at every shape while the deadline allows. Per set N: the kernel
# test with it on (element-wise bounds; step kernels.variantsN); for the
# first set also the two blocks against timm (blocks.csv rows whose variant
# names it; blocks.variants1) and the kernels at ViT-L/16's shape
# (results.tar: kernels-variants-1.csv; bench.variants1).
variant_sets=${GPU_CHECK_VARIANTS:-HTP_CUDA_GEMM=cutlass HTP_CUDA_ATTENTION=head HTP_CUDA_LAYER_NORM=warp HTP_CUDA_RESIDUAL=epilogue|HTP_CUDA_LINEAR_EPILOGUE=pass HTP_CUDA_ATTENTION=wmma}
set_number=0
variant_set_list=()
[ "$variant_sets" = none ] || IFS='|' read -ra variant_set_list <<<"$variant_sets"
for variant_list in "${variant_set_list[@]}"; do
  set_number=$((set_number + 1))
  read -ra variants <<<"$variant_list"
  [ ${#variants[@]} -gt 0 ] || continue
  gpu_test "kernels.variants$set_number" test_kernels_cuda "$(cap TESTS 90)" "${variants[@]}"
  check_out_count
  # What the CUTLASS GEMM did, from its once-a-shape notes (linear_sm90.cu).
  if [ -z "$dry" ] && [[ " ${variants[*]} " == *" HTP_CUDA_GEMM=cutlass "* ]]; then
    ran=$(grep -c 'CUTLASS sm90, 128 x' "$work/kernels.variants$set_number.log")
    declined=$(grep -c 'CUTLASS declined' "$work/kernels.variants$set_number.log")
    summary "cutlass$set_number" note "kernel test: $ran shapes ran on CUTLASS, $declined declined to cuBLAS (logs.txt: 'htp cuda: linear')"
  fi
  # The blocks and the kernel benchmark for the first set only: later sets are
  # the older paths, timed when they were the defaults (checks 2 and 3).
  [ "$set_number" -eq 1 ] || continue
  if [ -z "$dry" ] && [ -n "$htp_run" ] && [ -n "$have_python" ] &&
     [ -f "$blocks/vit_l16_bf16_tp1.so" ] && budget "blocks.variants$set_number" "$(cap BLOCKS 100)"; then
    env_args=()
    for v in "${variants[@]}"; do env_args+=(--htp-env "$v"); done
    run_logged "blocks.variants$set_number" "$limit" "${block_cmd[@]}" --timeout "$limit" --append \
      --only vit_b16_f32_tp1,vit_l16_bf16_tp1 --timm-check --no-compile "${env_args[@]}"
    rc=$?
    rows=$(grep '^row ' "$work/blocks.variants$set_number.log" | tr ' ' '\n' | awk -F= '
             $1 == "block" { if (line) print line; line = $2 }
             $1 == "htp_ms" || $1 == "eager_ms" || $1 == "x_eager" || $1 == "timm_error" { line = line " " $1 "=" $2 }
             END { if (line) print line }' | paste -sd';' -)
    case $rc in
      0) summary "blocks.variants$set_number" ok "${variants[*]}: $rows (blocks.csv)" ;;
      *) summary "blocks.variants$set_number" FAILED "exit $rc$(timed_out "$rc" && echo " at the ${limit}s limit"): $rows (logs.txt)" ;;
    esac
  fi
  if [ -z "$dry" ] && [ -n "$bench" ] && budget "bench.variants$set_number" 45; then
    csv=kernels-variants-$set_number.csv
    run_logged "bench.variants$set_number" "$limit" "${libenv[@]}" "${variants[@]}" "$bench" --batch 64 \
      --dim 1024 --heads 16 --mlp 4096 --repeats 10 --csv "$work/$csv"
    rc=$?
    save "$csv"
    if [ "$rc" -eq 0 ]; then
      summary "bench.variants$set_number" ok "${variants[*]}, ViT-L/16 batch 64: $(grep '^block_sum' "$work/bench.variants$set_number.log" |
                          awk '{printf "%s%s %s ms", sep, $2, $3; sep = ", "}') (results.tar: $csv)"
    else
      summary "bench.variants$set_number" FAILED "htp-bench-cuda exited $rc (logs.txt)"
    fi
  fi
done

finish

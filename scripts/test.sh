#!/usr/bin/env bash
# Runs every test: sets up (idempotent), builds, then
#   1. ctest in build/ (lit suites for the dialect, passes and end to end,
#      runtime / planner / kernel / executor unit tests, MPI runs);
#   2. ctest in build-asan/: the C parts (MLIR off) under ASan + UBSan;
#   3. ctest in build-tsan/: the C parts (MLIR and MPI off) under
#      ThreadSanitizer: the local backend's ranks, the checked device's
#      streams and the CPU kernels' pool are threads of one process;
#   4. scripts/fuzz.sh: each libFuzzer target (test/fuzz) for FUZZ_SECONDS
#      (default 60) from its committed corpus, counted as one test.
# Ends with one line "tests: N passed, M failed, K skipped" (skipped: GPU tests
# on a machine without one) and exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
# mpirun refuses root and more ranks than cores unless told; CI runs as root on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

scripts/setup.sh || { echo "tests: 0 passed, 1 failed (build)"; exit 1; }
# build-asan takes Open MPI 5 with ULFM where setup.sh installed it (.ompi5/),
# so the mpi backend is tested against both MPIs and a killed process is
# shrunk away (runtime.mpi.shrink.np3); build/ keeps Debian's Open MPI 4.
ulfm_args=""
[ -x .ompi5/bin/mpicc ] &&
  ulfm_args="-DMPI_C_COMPILER=$PWD/.ompi5/bin/mpicc -DMPIEXEC_EXECUTABLE=$PWD/.ompi5/bin/mpirun"
BUILD_DIR=build-asan CMAKE_ARGS="-DHTP_ENABLE_MLIR=OFF -DHTP_SANITIZE=ON -DHTP_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug $ulfm_args" \
  scripts/setup.sh || { echo "tests: 0 passed, 1 failed (sanitizer build)"; exit 1; }
BUILD_DIR=build-tsan CMAKE_ARGS="-DHTP_ENABLE_MLIR=OFF -DHTP_SANITIZE_THREAD=ON -DHTP_ENABLE_CUDA=OFF -DHTP_ENABLE_MPI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
  scripts/setup.sh || { echo "tests: 0 passed, 1 failed (thread sanitizer build)"; exit 1; }

passed=0; failed=0; skipped=0
run_ctest() {
  local dir=$1 log
  shift # the rest: ctest's own arguments
  log=$(mktemp)
  echo "== ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee "$log"
  # "100% tests passed, 0 tests failed out of 37"
  local summary total bad skip
  skip=$(grep -cE "^[[:space:]]*[0-9]+ - .*\(Skipped\)$" "$log")
  summary=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1)
  if [ -z "$summary" ]; then failed=$((failed + 1)); rm -f "$log"; return; fi
  bad=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
  total=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$summary")
  passed=$((passed + total - bad - skip)); failed=$((failed + bad)); skipped=$((skipped + skip))
  rm -f "$log"
}
run_ctest build
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest build-asan
# A race report fails its test (TSan's exit code 66). The kernel tests'
# ISA-capped copies and the precision cases run the same threads again:
# left to the other two builds (under TSan four fifths of the time).
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" run_ctest build-tsan \
  -E '^kernels\.[a-z0-9_]+\.(AVX2|AVX512_CORE|AVX512_CORE_BF16)$|^kernels\.precision'

echo "== fuzz: scripts/fuzz.sh (${FUZZ_SECONDS:-60} s per target)"
if scripts/fuzz.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

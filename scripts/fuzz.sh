#!/usr/bin/env bash
# Builds the libFuzzer targets of test/fuzz in build-fuzz/ (clang, ASan +
# UBSan) and runs each for FUZZ_SECONDS (default 60), starting from its
# committed corpus test/fuzz/corpus/<target>/ (seeds and past findings).
# New inputs go to build-fuzz/fuzz-work/<target>/ (the committed corpus is
# left as it is); a crash, leak, timeout or broken check is written to
# build-fuzz/fuzz-findings/<target>/ and makes the script exit 1.
# test/fuzz/<target>.dict, when present, gives the fuzzer the format's tokens.
#
#   scripts/fuzz.sh                      # every target, 60 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh npy # one target, 5 minutes
#   FUZZ_JOBS=2 ...                      # parallel workers per target
#
# To add a finding as a regression case: copy it into the target's corpus
# directory under a name that says what broke, and add a unit test.
set -uo pipefail
. "$(dirname "$0")/args.sh"
htp_script_args fuzz "scripts/fuzz.sh [TARGET...]" -1 "$@"
cd "$(dirname "$0")/.." || exit 1
# A named target without its source is refused before anything is configured.
for t in "$@"; do
  [ -f "test/fuzz/fuzz_$t.c" ] || { echo "fuzz: no target fuzz_$t in test/fuzz" >&2; exit 2; }
done

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-1}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CC_FUZZ=${CC_FUZZ:-clang-22}
CXX_FUZZ=${CXX_FUZZ:-clang++-22}

command -v "$CC_FUZZ" >/dev/null || { echo "fuzz: $CC_FUZZ not found (scripts/setup.sh installs it)"; exit 1; }
CC=$CC_FUZZ CXX=$CXX_FUZZ cmake -S . -B "$BUILD_DIR" -G Ninja -DHTP_FUZZ=ON \
  -DHTP_ENABLE_MLIR=OFF -DHTP_ENABLE_CUDA=OFF -DHTP_ENABLE_MPI=OFF >/dev/null ||
  { echo "fuzz: configure failed"; exit 1; }

targets=("$@")
if ((${#targets[@]} == 0)); then
  for dir in test/fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
# A target (named, or with a corpus folder) that this build lacks is an
# error, not a silent pass.
# (The list is read whole first: grep -q closing the pipe early would make
# ninja die of SIGPIPE, which pipefail counts as a failure.)
available=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null)
built=()
for t in "${targets[@]}"; do
  if grep -q "^fuzz_$t:" <<<"$available"; then
    built+=("$t")
  else
    echo "fuzz: no target fuzz_$t in test/fuzz"; exit 1
  fi
done
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${built[@]/#/fuzz_}" >/dev/null ||
  { echo "fuzz: build failed"; exit 1; }

status=0
for t in "${built[@]}"; do
  work="$BUILD_DIR/fuzz-work/$t" findings="$BUILD_DIR/fuzz-findings/$t"
  rm -rf "$findings"
  mkdir -p "$work" "$findings"
  parallel=()
  ((FUZZ_JOBS > 1)) && parallel=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
  log="$BUILD_DIR/fuzz-$t.log"
  echo "== fuzz_$t for ${FUZZ_SECONDS}s (log: $log)"
  # -timeout: one input may take 10 s; -rss_limit_mb: a reader that
  # allocates what a header claims is a finding, not a swapping machine.
  dict=()
  [ -f "test/fuzz/$t.dict" ] && dict=(-dict="test/fuzz/$t.dict")
  "$BUILD_DIR/test/fuzz/fuzz_$t" "$work" "test/fuzz/corpus/$t" "${dict[@]}" \
    -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$findings/" "${parallel[@]}" >"$log" 2>&1
  rc=$?
  # With -jobs the workers log to fuzz-N.log in the working directory.
  if compgen -G "fuzz-[0-9]*.log" >/dev/null; then cat fuzz-[0-9]*.log >>"$log"; rm -f fuzz-[0-9]*.log; fi
  if ((rc != 0)) || compgen -G "$findings/*" >/dev/null; then
    echo "fuzz: fuzz_$t FOUND A PROBLEM (exit $rc); inputs in $findings:"
    ls "$findings"
    grep -m3 -E "ERROR|broken promise|runtime error" "$log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$log" | tail -2
    echo "fuzz: fuzz_$t: no finding"
  fi
done
exit $status

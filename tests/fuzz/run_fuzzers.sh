#!/usr/bin/env bash
# The short fuzz run of the test suite: configures a second build directory
# with clang and -DPS_FUZZ=ON, builds only the libFuzzer targets, and runs
# each for a fixed number of executions from its checked-in seed corpus
# (tests/fuzz/corpus/<target>/), with a fixed seed. Exit 0 if no target
# crashed; 77 (skipped) without clang or libFuzzer.
#
#   tests/fuzz/run_fuzzers.sh SOURCE_DIR FUZZ_BUILD_DIR [TARGET...]
#
# Environment: FUZZ_RUNS multiplies every target's executions (default 1;
# the short run is 540,000 executions, under a minute on one core);
# FUZZ_SECONDS, if set, runs each target for that long instead (a longer run,
# docs/security.md); FUZZ_JOBS: build parallelism (default 2). New inputs go
# to FUZZ_BUILD_DIR/corpus/<target>, crashes to FUZZ_BUILD_DIR/crashes/.
set -uo pipefail
SRC=$(cd "${1:?source dir}" && pwd)
BUILD=${2:?fuzz build dir}
shift 2

# Executions per target in the short run: each target takes a few seconds.
declare -A RUNS=(
  [fuzz_job_spec_json]=50000
  [fuzz_job_spec_binary]=50000
  [fuzz_coordinator_requests]=150000
  [fuzz_parameter_requests]=20000
  [fuzz_idx_reader]=20000
  [fuzz_csv_reader]=50000
  [fuzz_libsvm_reader]=50000
  [fuzz_model_file]=50000
  [fuzz_model_tables]=50000
  [fuzz_shard_store_decoder]=100000
)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(fuzz_job_spec_json fuzz_job_spec_binary
  fuzz_coordinator_requests fuzz_parameter_requests fuzz_idx_reader
  fuzz_csv_reader fuzz_libsvm_reader fuzz_model_file fuzz_model_tables
  fuzz_shard_store_decoder)

if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
  echo "fuzz: clang is not installed (scripts/setup.sh installs it); skipped"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' \
  >"$probe/probe.cc"
if ! clang++ -fsanitize=fuzzer "$probe/probe.cc" -o "$probe/probe" 2>"$probe/log"; then
  echo "fuzz: clang cannot link libFuzzer (libclang-rt-14-dev); skipped"
  cat "$probe/log"
  exit 77
fi

mkdir -p "$BUILD"
# -O1 and line tables only: the usual fuzzing build, and the quickest to
# compile (stack traces still name files and lines).
if ! CC=clang CXX=clang++ cmake -S "$SRC" -B "$BUILD" -G Ninja -DPS_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_FLAGS_FUZZ="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_FUZZ="-O1 -gline-tables-only" >"$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log"
  exit 1
fi
start=$(date +%s)
if ! cmake --build "$BUILD" --target "${TARGETS[@]}" --parallel "${FUZZ_JOBS:-2}" \
    >"$BUILD/build.log" 2>&1; then
  tail -n 60 "$BUILD/build.log"
  exit 1
fi
echo "fuzz: built ${#TARGETS[@]} targets in $(($(date +%s) - start)) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
total=0
mkdir -p "$BUILD/crashes"
for target in "${TARGETS[@]}"; do
  seeds="$SRC/tests/fuzz/corpus/$target"
  work="$BUILD/corpus/$target"
  # Every run starts from the checked-in corpus alone: the same executions
  # each time.
  rm -rf "$work"
  mkdir -p "$work"
  args=(-seed=1 -max_len=8192 -timeout=20 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$BUILD/crashes/$target-")
  if [ -n "${FUZZ_SECONDS:-}" ]; then
    args+=(-max_total_time="$FUZZ_SECONDS")
  else
    args+=(-runs=$((${RUNS[$target]:-10000} * ${FUZZ_RUNS:-1})))
  fi
  t0=$(date +%s)
  # New inputs go to the first directory; the seeds are only read.
  "$BUILD/tests/fuzz/$target" "${args[@]}" "$work" "$seeds" >"$BUILD/$target.log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD/$target.log" | tail -n 1)
  total=$((total + ${runs:-0}))
  if [ $rc -ne 0 ]; then
    echo "fuzz: $target FAILED after ${runs:-?} executions (exit $rc); log $BUILD/$target.log"
    grep -E "ERROR|fuzz invariant|runtime error|SUMMARY|Test unit written" "$BUILD/$target.log" | head -n 20
    failed=1
  else
    echo "fuzz: $target: ${runs:-?} executions, no crash ($(($(date +%s) - t0)) s," \
      "corpus $(ls "$seeds" | wc -l) seeds + $(ls "$work" | wc -l) new)"
  fi
done
echo "fuzz: $total executions in all"
exit $failed

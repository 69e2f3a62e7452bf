#!/usr/bin/env bash
# Builds the project with a sanitizer in its own build directory and runs the
# unit and integration tests (ctest labels `unit` and `integration`) under it.
#
#   scripts/sanitize.sh asan|tsan [ctest args...]
#
# asan: AddressSanitizer with LeakSanitizer, and UndefinedBehaviorSanitizer
# (-DPS_ASAN=ON), into build-asan/; tsan: ThreadSanitizer (-DPS_TSAN=ON),
# into build-tsan/. Built with clang (CC/CXX override it). Environment:
# SAN_BUILD_DIR overrides the directory; JOBS
# the build parallelism (default: all cores); TEST_JOBS ctest's (default 2).
# -O1 with line tables: the usual sanitizer build, quicker to compile than -O2
# and with file:line in every report.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keyed on paths relative to the checkout, so that a fresh clone in
# another folder hits the cache a previous one filled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
mode=${1:?asan or tsan}
shift
case "$mode" in
  asan) option=PS_ASAN ;;
  tsan) option=PS_TSAN ;;
  *) echo "sanitize: unknown mode $mode (asan or tsan)" >&2; exit 2 ;;
esac
BUILD_DIR=${SAN_BUILD_DIR:-build-$mode}
CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$BUILD_DIR" -G Ninja -D$option=ON -DCMAKE_BUILD_TYPE=Sanitize \
  -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS_SANITIZE="-O1 -gline-tables-only" >/dev/null
start=$(date +%s)
cmake --build "$BUILD_DIR" --parallel "${JOBS:-$(nproc)}" --target \
  unit_common_tests unit_server_tests unit_worker_tests unit_coordinator_tests \
  unit_client_tests integration_tests
echo "sanitize: $mode build took $(($(date +%s) - start)) s"

# Every report fails the test that caused it. Leaks are reported at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan_suppressions.txt}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan_suppressions.txt}
cd "$BUILD_DIR"
start=$(date +%s)
status=0
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" -L 'unit|integration' "$@" ||
  status=$?
echo "sanitize: $mode tests took $(($(date +%s) - start)) s"
exit $status

#!/usr/bin/env bash
# Installs what is needed, builds everything and runs the whole test suite
# (unit, integration and system tests) with ctest. Warnings are errors here
# (-DPS_WERROR=ON), as in CI. Then, when no ctest arguments are given, the unit
# and integration tests again under AddressSanitizer and UndefinedBehavior-
# Sanitizer (scripts/sanitize.sh asan, in build-asan/; PS_ASAN_SUITE=0 skips
# it), whose clang build also runs the thread-safety analysis (so the ctest
# lint_thread_safety is skipped then). docs/development.md lists the checks
# and what each costs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
CMAKE_ARGS="-DPS_WERROR=ON ${CMAKE_ARGS:-}" BUILD_DIR=$BUILD_DIR bash scripts/build.sh
status=0
skip=()
if [ $# -eq 0 ] && [ "${PS_ASAN_SUITE:-1}" != 0 ]; then
  # The sanitizer build below is clang's, with -Wthread-safety as an error
  # (CMakeLists.txt): it analyses what lint_thread_safety would, as it compiles.
  skip=(-E '^lint_thread_safety$')
fi
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "${skip[@]}" "$@") ||
  status=$?
if [ $# -eq 0 ] && [ "${PS_ASAN_SUITE:-1}" != 0 ]; then
  bash scripts/sanitize.sh asan || status=$?
fi
exit $status

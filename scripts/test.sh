#!/usr/bin/env bash
# Installs what is needed, builds everything and runs the whole test suite
# with ctest. Warnings are errors here (-DPS_WERROR=ON), as in CI.
#
# By default each test is compiled once: the GCC build (build/) holds the
# executables and runs every test but the unit and integration ones
# (system, Python, deploy, fuzz, benchmark smoke); the unit and integration
# tests are built and run under AddressSanitizer and UndefinedBehavior-
# Sanitizer (scripts/sanitize.sh asan, in build-asan/), whose clang build also
# runs the thread-safety analysis (so lint_thread_safety is skipped).
# PS_ASAN_SUITE=0, or any ctest argument, builds and runs everything in the
# GCC build instead. docs/development.md lists the checks and what each costs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
sanitized=0
if [ $# -eq 0 ] && [ "${PS_ASAN_SUITE:-1}" != 0 ]; then sanitized=1; fi
unit_tests=ON
[ $sanitized = 0 ] || unit_tests=OFF
CMAKE_ARGS="-DPS_WERROR=ON -DPS_UNIT_TESTS=$unit_tests ${CMAKE_ARGS:-}" \
  BUILD_DIR=$BUILD_DIR bash scripts/build.sh
status=0
skip=()
# The sanitizer build is clang's, with -Wthread-safety as an error
# (CMakeLists.txt): it analyses what lint_thread_safety would, as it compiles.
[ $sanitized = 0 ] || skip=(-E '^lint_thread_safety$')
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "${skip[@]}" "$@") ||
  status=$?
if [ $sanitized = 1 ]; then
  bash scripts/sanitize.sh asan || status=$?
fi
exit $status

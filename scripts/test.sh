#!/usr/bin/env bash
# Installs what is needed, builds everything and runs the whole test suite
# (unit, integration and system tests) with ctest. Warnings are errors here
# (-DPS_WERROR=ON), as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
CMAKE_ARGS="-DPS_WERROR=ON ${CMAKE_ARGS:-}" BUILD_DIR=$BUILD_DIR bash scripts/build.sh
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "$@"

#!/usr/bin/env bash
# Installs what is needed, builds everything and runs the whole test suite
# (unit, integration and system tests) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
BUILD_DIR=$BUILD_DIR bash scripts/build.sh
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 600 -j "${TEST_JOBS:-2}" "$@"

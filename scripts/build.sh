#!/usr/bin/env bash
# Configures and builds the project into build/ (or $BUILD_DIR) with Ninja and ccache.
# CMAKE_ARGS: extra configure arguments (scripts/test.sh passes -DPS_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keyed on paths relative to the checkout, so that a fresh clone in
# another folder hits the cache a previous one filled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" --parallel "${JOBS:-$(nproc)}" "$@"

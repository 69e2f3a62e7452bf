#!/usr/bin/env bash
# Configures and builds the project into build/ (or $BUILD_DIR) with Ninja and ccache.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$BUILD_DIR" --parallel "${JOBS:-$(nproc)}" "$@"

#!/usr/bin/env bash
# Packs what the GPU measurements need into .gpu-bundle/ (git-ignored, under
# the device tool's 64 MiB): the executables and their libraries
# (../shared/tools/gpu-bundle.sh, stripped, as one .tar.xz) and the
# Fashion-MNIST files. Build first (scripts/build.sh). Then, on the GPU
# machine (device tool: carry .gpu-bundle):
#
#   bench/gpu_run.sh all|conformance|gemm|one_worker [DEVICES]
#
# (docs/benchmarks.md, "Worker compute").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
out=.gpu-bundle
stage=$(mktemp -d -t ps-gpu-pack.XXXXXX)
trap 'rm -rf "$stage"' EXIT
[ -e "$BUILD_DIR/worker/libps_cuda_backend.so" ] ||
  { echo "gpu_pack: $BUILD_DIR has no CUDA backend (build with nvcc)" >&2; exit 1; }
../shared/tools/gpu-bundle.sh "$stage/bundle" \
  "$BUILD_DIR/coordinator/ps-coordinator" "$BUILD_DIR/server/ps-server" \
  "$BUILD_DIR/worker/ps-worker" "$BUILD_DIR/client/psctl" \
  "$BUILD_DIR/worker/libps_cuda_backend.so" \
  "$BUILD_DIR/tests/unit_worker_tests" "$BUILD_DIR/bench/ps-backend-bench" >/dev/null
strip --strip-unneeded "$stage"/bundle/bin/*
rm -rf "$out"
mkdir -p "$out/data"
tar -cJf "$out/bundle.tar.xz" -C "$stage" bundle
cp "$DATA_DIR"/*.gz "$out/data/"
du -sh "$out"

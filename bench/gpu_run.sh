#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .gpu-bundle carried
# (made by bench/gpu_pack.sh): unpacks it and runs
#   conformance: the backend conformance suite (CUDA half included) and the
#                model tests (unit_worker_tests);
#   gemm:        ps-backend-bench (our backends against cuBLAS/OpenBLAS);
#   sanitize:    the CUDA half of the suite under compute-sanitizer (memcheck,
#                then racecheck; SANITIZE_FILTER narrows it, e.g.
#                '*CtrBackend*/cuda');
#   one_worker:  bench/one_worker.sh on DEVICES (default "gpu cpu");
#   all:         conformance, gemm and one_worker.
# Output goes to stdout and, when $OUT is set, to files under it.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
devices=${2:-gpu cpu}
dir=${GPU_BUNDLE_DIR:-/tmp/ps-gpu}
out=${OUT:-$(mktemp -d)}
mkdir -p "$dir" "$out"
if [ ! -x "$dir/bundle/bin/ps-worker" ]; then
  if command -v xz >/dev/null; then
    tar -xJf .gpu-bundle/bundle.tar.xz -C "$dir"
  else  # A bare image may lack xz; Python's tarfile reads it.
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      .gpu-bundle/bundle.tar.xz "$dir"
  fi
fi
export LD_LIBRARY_PATH=$dir/bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
case $what in all | conformance)
  "$dir/bundle/bin/unit_worker_tests" 2>&1 | tee "$out/conformance.txt" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |tests ran' ;;
esac
case $what in sanitize)
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$dir/bundle/bin/unit_worker_tests" --gtest_filter="${SANITIZE_FILTER:-*/cuda}" 2>&1 |
      tee "$out/sanitize-$tool.txt" | tail -n 5
  done ;;
esac
case $what in all | gemm)
  "$dir/bundle/bin/ps-backend-bench" --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true 2>&1 | tee "$out/gemm.txt" ;;
esac
case $what in all | one_worker)
  BUILD_DIR=$dir/bundle DATA_DIR=$PWD/.gpu-bundle/data DEVICES="$devices" \
    REPS=${REPS:-1} bench/one_worker.sh "$out/one_worker" 2>&1 | tee "$out/one_worker.txt" ;;
esac

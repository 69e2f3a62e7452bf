#!/usr/bin/env bash
# Trains the Fashion-MNIST CNN of fashion_mnist_cnn.py on a local cluster:
# 1 coordinator and 2 parameter servers (the build tree's executables), 2
# PyTorch workers (paramserver.torch.Worker), each a separate process on
# loopback. Prints every epoch's test accuracy, the time to 0.92, and stops
# the cluster.
#
#   examples/pytorch/run.sh [--epochs N] [other fashion_mnist_cnn.py submit flags]
#
# Needs the Debian packages of scripts/setup.sh (python3-torch,
# dataset-fashion-mnist); builds what it runs (the executables and
# build/python) unless PS_SKIP_BUILD=1. BUILD_DIR (default build) picks
# another build tree; RUN_DIR keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${PS_SKIP_BUILD:-0}" != 1 ]; then
  BUILD_DIR=${BUILD_DIR:-build} bash scripts/build.sh \
    --target ps-coordinator ps-server paramserver_python >/dev/null
fi
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
RUN_DIR=${RUN_DIR:-$(mktemp -d -t ps-pytorch.XXXXXX)}
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
"$PYTHON" -c 'import torch, paramserver' 2>/dev/null || {
  echo "run.sh: needs python3-torch and the paramserver package in $BUILD_DIR/python" \
       "(scripts/setup.sh, then scripts/build.sh)" >&2
  exit 1
}
source scripts/lib/cluster.sh
CLUSTER_BUILD_DIR=$BUILD_DIR
CLUSTER_RUN_DIR=$RUN_DIR
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
mkdir -p "$RUN_DIR"

cluster_spawn coordinator "$BUILD_DIR/coordinator/ps-coordinator" --listen=127.0.0.1:0 \
  --data_dir="$RUN_DIR/coordinator.data" --heartbeat_interval_ms=200 --metrics_port=-1
COORDINATOR="127.0.0.1:$(cluster_port "$RUN_DIR/coordinator.ports" grpc_port)"
for i in 0 1; do
  cluster_spawn "server$i" "$BUILD_DIR/server/ps-server" --coordinator="$COORDINATOR" \
    --metrics_port=-1
done
EXAMPLE=examples/pytorch/fashion_mnist_cnn.py
JOB=$("$PYTHON" "$EXAMPLE" submit --coordinator="$COORDINATOR" "$@")
echo "submitted $JOB; logs in $RUN_DIR"
for i in 0 1; do
  "$PYTHON" -u "$EXAMPLE" worker --coordinator="$COORDINATOR" >"$RUN_DIR/pyworker$i.log" 2>&1 &
  CLUSTER_PIDS+=($!)
  CLUSTER_NAMES+=("pyworker$i")
done

"$PYTHON" - "$COORDINATOR" "$JOB" <<'PY'
import sys
import paramserver as ps

coordinator, job = sys.argv[1:]
with ps.JobClient(coordinator) as client:
    shown = 0
    for status in client.watch(job):
        records = status.progress.epochs
        for r in records[shown:]:
            print(f"epoch {r.epoch:3d}  test accuracy {r.test_accuracy:.4f}  "
                  f"{(r.end_time_ms - status.start_time_ms) / 1000:7.1f} s",
                  flush=True)
        shown = len(records)
    if status.state != ps.v1.SUCCEEDED:
        sys.exit(f"{job} {ps.v1.JobState.Name(status.state)}: {status.message}")
    first = next((r for r in status.progress.epochs
                  if r.test_accuracy >= 0.92), None)
    total = (status.end_time_ms - status.start_time_ms) / 1000
    print(f"{job} SUCCEEDED in {total:.1f} s: final test accuracy "
          f"{status.progress.test_accuracy:.4f}; "
          + (f"0.92 reached after epoch {first.epoch}, "
             f"{(first.end_time_ms - status.start_time_ms) / 1000:.1f} s"
             if first else "0.92 not reached"))
PY

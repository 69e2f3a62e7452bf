#!/usr/bin/env bash
# A worker whose parameter server stops answering in the middle of a job
# (SIGSTOP: its connections stay open and nothing is answered, as in a
# partition) still exits 0 on SIGTERM within a few seconds: stopping its
# trainer cancels the calls in flight rather than waiting out their deadlines
# (30 s) and retries. Real processes: 1 coordinator, 1 server, 1 worker.
#   stuck_server_test.sh BUILD_DIR SOURCE_DIR
# Exits 77 (skipped) without the Fashion-MNIST files. The only time limit is
# the bound on the worker's exit that this test is about (10 s; the grace of
# common/daemon.h is 5 s).
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 64
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
PSCTL=$BUILD_DIR/client/psctl
DATA_DIR=${PS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$DATA_DIR/train-images-idx3-ubyte.gz" ]; then
  echo "skipped: no Fashion-MNIST in $DATA_DIR"
  exit 77
fi
# shellcheck source=../../scripts/lib/cluster.sh
source "$SOURCE_DIR/scripts/lib/cluster.sh"
RUN_DIR=$(mktemp -d -t ps-stuck-server.XXXXXX)
failures=0

cleanup() {
  local pid
  for pid in "${CLUSTER_PIDS[@]}"; do
    kill -CONT "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  if [ "$failures" -eq 0 ]; then
    rm -rf "$RUN_DIR"
  else
    for log in "$RUN_DIR"/*.log; do
      echo "----- $(basename "$log") (last 40 lines) -----"
      tail -n 40 "$log"
    done
    echo "# run directory kept: $RUN_DIR"
  fi
}
trap cleanup EXIT

if ! cluster_start "$BUILD_DIR" "$RUN_DIR" 1 1; then
  echo "not ok - the cluster starts"
  failures=1
  exit 1
fi

cat >"$RUN_DIR/job.json" <<EOF
{
  "name": "stuck-server",
  "model": { "kind": "MLP", "input_dim": 784, "num_classes": 10,
             "hidden_layers": [64], "activation": "RELU" },
  "dataset": {
    "format": "IDX",
    "train_images": "$DATA_DIR/train-images-idx3-ubyte.gz",
    "train_labels": "$DATA_DIR/train-labels-idx1-ubyte.gz",
    "test_images": "$DATA_DIR/t10k-images-idx3-ubyte.gz",
    "test_labels": "$DATA_DIR/t10k-labels-idx1-ubyte.gz",
    "max_train_samples": 6000,
    "max_test_samples": 1000
  },
  "epochs": 50,
  "batch_size": 32,
  "seed": 1,
  "optimizer": { "adam": { "learning_rate": 0.001 } },
  "num_workers": 1,
  "num_servers": 1
}
EOF
if ! "$PSCTL" --coordinator="$COORDINATOR" submit "$RUN_DIR/job.json" \
    >"$RUN_DIR/submit.out" 2>&1; then
  echo "not ok - psctl submit"
  cat "$RUN_DIR/submit.out"
  failures=1
  exit 1
fi
JOB=$(sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' "$RUN_DIR/submit.out")

# Waits (up to 60 s) until the job has trained a few steps.
clock=0
for _ in $(seq 1 600); do
  "$PSCTL" --coordinator="$COORDINATOR" get "$JOB" >"$RUN_DIR/get.out" 2>/dev/null
  clock=$(sed -nE 's/^ *"clock": "?([0-9]+)"?,?$/\1/p' "$RUN_DIR/get.out" | head -n 1)
  [ "${clock:-0}" -ge 5 ] && break
  sleep 0.1
done
if [ "${clock:-0}" -lt 5 ]; then
  echo "not ok - the job trains (clock ${clock:-0})"
  cat "$RUN_DIR/get.out"
  failures=1
  exit 1
fi
echo "ok - the job trains (clock $clock)"

server_pid=${CLUSTER_PIDS[$(cluster_index server0)]}
worker_pid=${CLUSTER_PIDS[$(cluster_index worker0)]}
kill -STOP "$server_pid"
sleep 1  # The worker's next call waits on the stopped server.
start=$SECONDS
kill -TERM "$worker_pid"
for _ in $(seq 1 100); do
  kill -0 "$worker_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$worker_pid" 2>/dev/null; then
  echo "not ok - ps-worker exits within 10 s of SIGTERM while its server is stopped"
  failures=1
else
  wait "$worker_pid"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok - ps-worker exits 0 within $((SECONDS - start)) s of SIGTERM while its server is stopped"
  else
    echo "not ok - ps-worker exits 0 on SIGTERM while its server is stopped (exit $rc)"
    failures=1
  fi
fi
kill -CONT "$server_pid"
exit "$failures"

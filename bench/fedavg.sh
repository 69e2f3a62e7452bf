#!/usr/bin/env bash
# Local SGD / federated averaging against BSP on the README job
# (docs/training.md, "Local SGD and federated averaging"; docs/benchmarks.md):
# deploy/jobs/fashion-mnist-mlp.json (MLP 784-256-128-10, batch 64 per
# worker, 2 workers, 2 servers) trained
#   - with BSP as shipped (Adam 1e-3 on the servers): "BSP";
#   - with FedAvg for each H in LOCAL_STEPS: local SGD (rate LOCAL_LR,
#     momentum LOCAL_MOMENTUM, reset every round) for H steps, the servers'
#     SGD at rate 1 averaging the changes: "FedAvg H=...";
# (SERVER_MOMENTUM > 0: the servers' SGD with that momentum, FedAvgM,
# rows "FedAvgM H=...");
# each on IID data and on a non-IID partition (dataset.labels_per_worker =
# LABELS_PER_WORKER: with 2 workers and 5, each worker sees 5 of the 10
# classes, disjoint). Every run is a fresh local cluster of processes
# (scripts/lib/cluster.sh: 1 coordinator, 2 servers, 2 CPU workers), EPOCHS
# epochs, durability MEMORY. Bytes moved: the sum over both workers of
# ps_worker_push_bytes_total and ps_worker_pull_bytes_total scraped from
# their /metrics after the job; accuracy: worker 0's on the 10,000 test
# images after each epoch (the job's JobProgress.epochs). Prints a Markdown
# table; every run's JSON line is in OUT_DIR/results.jsonl.
#
#   EPOCHS=10 LOCAL_STEPS="1 4 16" bench/fedavg.sh [OUT_DIR]
#   PARTITIONS="iid" LOCAL_STEPS=4 EPOCHS=1 bench/fedavg.sh   # a smoke run
#
# BSP=0 leaves the BSP runs out (for tuning the FedAvg rows).
# Uses the executables in BUILD_DIR (default build): build them first.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-fedavg.XXXXXX)}
EPOCHS=${EPOCHS:-10}
LOCAL_STEPS=${LOCAL_STEPS:-1 4 16}
LOCAL_LR=${LOCAL_LR:-0.1}
LOCAL_MOMENTUM=${LOCAL_MOMENTUM:-0.9}
SERVER_MOMENTUM=${SERVER_MOMENTUM:-0}
LABELS_PER_WORKER=${LABELS_PER_WORKER:-5}
PARTITIONS=${PARTITIONS:-iid non-iid}
BUILD_DIR=${BUILD_DIR:-build}
BASE=${BASE:-deploy/jobs/fashion-mnist-mlp.json}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source scripts/lib/cluster.sh
CLUSTER_BUILD_DIR=$BUILD_DIR
for exe in "coordinator ps-coordinator" "server ps-server" "worker ps-worker" "client psctl"; do
  # shellcheck disable=SC2086  # "subdir name"
  bin=$(cluster_binary $exe)
  [ -x "$bin" ] || { echo "fedavg: $bin is missing: build first (scripts/build.sh)" >&2; exit 1; }
done
PSCTL=$(cluster_binary client psctl)
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# One run: NAME PARTITION then fedavg.py job's arguments.
run() {
  local name=$1 partition=$2 dir id labels=0
  shift 2
  dir=$OUT/$(echo "$name-$partition" | tr ' =' '__')
  mkdir -p "$dir"
  [ "$partition" = non-iid ] && labels=$LABELS_PER_WORKER
  python3 bench/fedavg.py job --base "$BASE" --epochs "$EPOCHS" \
    --labels-per-worker "$labels" "$@" >"$dir/job.json"
  echo "fedavg: $name, $partition" >&2
  cluster_start "$BUILD_DIR" "$dir" 2 2 >/dev/null
  "$PSCTL" --coordinator="$COORDINATOR" submit "$dir/job.json" --watch \
    >"$dir/watch.log" 2>&1 || { tail -n 5 "$dir/watch.log" >&2; cluster_stop >/dev/null 2>&1 || true; return 1; }
  id=$(sed -n 's/^submitted //p' "$dir/watch.log")
  "$PSCTL" --coordinator="$COORDINATOR" get "$id" >"$dir/status.json"
  for w in 0 1; do
    curl -sf "http://127.0.0.1:$(cluster_port "$dir/worker$w.ports" metrics_port)/metrics" \
      >"$dir/worker$w.metrics"
  done
  cluster_stop >/dev/null 2>&1 || true
  python3 bench/fedavg.py record --status "$dir/status.json" \
    --metrics "$dir/worker0.metrics" "$dir/worker1.metrics" \
    --name "$name" --partition "$partition" >>"$RESULTS"
}

for partition in $PARTITIONS; do
  [ "${BSP:-1}" = 0 ] || run "BSP (Adam 1e-3)" "$partition" --mode bsp
  fedavg=FedAvg
  [ "$SERVER_MOMENTUM" = 0 ] || fedavg=FedAvgM
  for h in $LOCAL_STEPS; do
    run "$fedavg H=$h" "$partition" --mode fedavg --local-steps "$h" \
      --local-lr "$LOCAL_LR" --local-momentum "$LOCAL_MOMENTUM" \
      --server-momentum "$SERVER_MOMENTUM"
  done
done
echo "epochs $EPOCHS, local SGD rate $LOCAL_LR momentum $LOCAL_MOMENTUM," \
  "server SGD rate 1 momentum $SERVER_MOMENTUM," \
  "non-IID: $LABELS_PER_WORKER labels per worker; results in $OUT"
python3 bench/fedavg.py table "$RESULTS"

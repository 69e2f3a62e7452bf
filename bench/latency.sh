#!/usr/bin/env bash
# Round trips per BSP step, measured with network latency between the workers
# and the servers (docs/benchmarks.md, "Round trips per step"). This kernel
# has no netem, so each server is reached through bench/delay_proxy.py, which
# delays every byte by DELAY ms each way: the server advertises 127.0.0.2 and
# its port, where the proxy listens, and the proxy forwards to 127.0.0.1.
#
#   DELAYS="0 10 20" ROUNDS=3 bench/latency.sh [OUT_DIR]
#
# The job is the README's (deploy/jobs/fashion-mnist-mlp.json: MLP, Adam,
# batch 64 per worker, 2 workers, 2 servers, BSP, durability WAL) on
# TRAIN_SAMPLES training samples (default 12800: 100 clocks an epoch) for 3
# epochs, evaluating on 1000 test samples. A step's time is read from the
# job's own epoch records: (end of epoch 3 - end of epoch 1) / 200 clocks.
# With a one-way delay d, a step that waits for r round trips takes about
# r * 2d longer than without delay: the script prints r for each delay,
# (step(d) - step(0)) / 2d, from the medians of ROUNDS runs. MODES picks the
# workers' data path: "pipelined" (as shipped: the push overlaps the next
# step and the next clock's pull is sent before the push is answered) and
# "sequential" (--overlap_push=false --prefetch_pull=false: push, wait,
# pull, wait), both by default, in the same rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-latency.XXXXXX)}
DELAYS=${DELAYS:-0 10 20}
MODES=${MODES:-pipelined sequential}
ROUNDS=${ROUNDS:-3}
TRAIN_SAMPLES=${TRAIN_SAMPLES:-12800}
BUILD_DIR=${BUILD_DIR:-build}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source scripts/lib/cluster.sh
CLUSTER_BUILD_DIR=$BUILD_DIR
PSCTL=$(cluster_binary client psctl)
[ -x "$PSCTL" ] || { echo "latency: $PSCTL is missing: build first (scripts/build.sh)" >&2; exit 1; }
PROXY_PID=""
cleanup() {
  [ -z "$PROXY_PID" ] || kill "$PROXY_PID" 2>/dev/null || true
  cluster_stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
: >"$OUT/steps.txt"

# One run: MODE DELAY_MS ROUND; appends "mode delay step_ms" to steps.txt.
run_once() {
  local mode=$1 delay=$2 round=$3 dir routes=() i port id
  dir=$OUT/$mode-d$delay-r$round
  mkdir -p "$dir"
  "$PY" - "$DATA_DIR" "$TRAIN_SAMPLES" >"$dir/job.json" <<'PYEOF'
import json, sys
spec = json.load(open("deploy/jobs/fashion-mnist-mlp.json"))
data_dir, samples = sys.argv[1], int(sys.argv[2])
spec["epochs"] = 3
for key in ("train_images", "train_labels", "test_images", "test_labels"):
    spec["dataset"][key] = spec["dataset"][key].replace(
        "/usr/share/datasets/fashion-mnist", data_dir)
spec["dataset"]["max_train_samples"] = samples
spec["dataset"]["max_test_samples"] = 1000
print(json.dumps(spec))
PYEOF
  CLUSTER_WORKER_ARGS=()
  if [ "$mode" = sequential ]; then
    CLUSTER_WORKER_ARGS=("--overlap_push=false --prefetch_pull=false"
                         "--overlap_push=false --prefetch_pull=false")
  fi
  CLUSTER_SERVER_ARGS="--advertise_host=127.0.0.2" \
    cluster_start "$BUILD_DIR" "$dir" 2 2 >/dev/null
  for i in 0 1; do
    port=$(cluster_port "$dir/server$i.ports" grpc_port)
    routes+=("127.0.0.2:$port=127.0.0.1:$port")
  done
  "$PY" bench/delay_proxy.py --delay_ms "$delay" "${routes[@]}" >"$dir/proxy.log" 2>&1 &
  PROXY_PID=$!
  for _ in $(seq 1 50); do grep -q ready "$dir/proxy.log" 2>/dev/null && break; sleep 0.1; done
  "$PSCTL" --coordinator="$COORDINATOR" submit "$dir/job.json" --watch >"$dir/watch.log" 2>&1 ||
    { tail -n 5 "$dir/watch.log" >&2; return 1; }
  id=$(sed -n 's/^submitted //p' "$dir/watch.log")
  "$PSCTL" --coordinator="$COORDINATOR" get "$id" >"$dir/status.json"
  kill "$PROXY_PID" 2>/dev/null || true
  wait "$PROXY_PID" 2>/dev/null || true
  PROXY_PID=""
  cluster_stop >/dev/null 2>&1 || true
  "$PY" - "$dir/status.json" "$mode" "$delay" "$TRAIN_SAMPLES" >>"$OUT/steps.txt" <<'PYEOF'
import json, sys
status = json.load(open(sys.argv[1]))
epochs = {int(e["epoch"]): int(e["end_time_ms"]) for e in status["progress"]["epochs"]}
clocks_per_epoch = int(sys.argv[4]) // 128
print(sys.argv[2], sys.argv[3], (epochs[3] - epochs[1]) / (2 * clocks_per_epoch))
PYEOF
  echo "latency: $mode, delay $delay ms, round $round: $(tail -n 1 "$OUT/steps.txt" | cut -d' ' -f3) ms a step" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  for mode in $MODES; do
    for delay in $DELAYS; do run_once "$mode" "$delay" "$round"; done
  done
done
"$PY" - "$OUT/steps.txt" <<'PYEOF' | tee "$OUT/table.md"
import statistics, sys
steps = {}
for line in open(sys.argv[1]):
    mode, d, ms = line.split()
    steps.setdefault(mode, {}).setdefault(float(d), []).append(float(ms))
print("| data path | one-way delay | round trip | step (median) | added per step | round trips per step |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for mode in steps:
    base = statistics.median(steps[mode][min(steps[mode])])
    for d in sorted(steps[mode]):
        m = statistics.median(steps[mode][d])
        trips = "" if d == min(steps[mode]) else "%.2f" % ((m - base) / (2 * d))
        print("| %s | %g ms | %g ms | %.1f ms | %.1f ms | %s |" % (mode, d, 2 * d, m, m - base, trips))
PYEOF
echo "runs: $OUT" >&2

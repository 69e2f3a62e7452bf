#!/usr/bin/env bash
# One worker on one device (docs/benchmarks.md, "One worker"): a local cluster
# of 1 coordinator, 1 server and 1 worker (ps-worker --device=DEVICE) trains
# deploy/jobs/fashion-mnist-MODEL.json; prints, per device and model, the
# worker's step split (mean pull, copies to the device, compute, copies to
# the host, push, and the part of the push training waited for), its
# samples/s and the time to the target test accuracy.
#
#   BUILD_DIR=build DEVICES="cpu gpu" MODELS="mlp cnn" REPS=3 bench/one_worker.sh [OUT_DIR]
#
# BUILD_DIR is a build tree or a folder made by ../shared/tools/gpu-bundle.sh
# (with ps-coordinator ps-server ps-worker psctl and libps_cuda_backend.so in
# bin/). DATA_DIR: the Fashion-MNIST .gz files (default: Debian's
# dataset-fashion-mnist). TARGET_MLP (0.88), TARGET_CNN (0.91): the accuracy
# targets; EPOCHS_MLP / EPOCHS_CNN override the jobs' epochs. OVERLAP=false
# runs the workers with --overlap_push=false, PREFETCH=false with
# --prefetch_pull=false. CONSISTENCY: the job's
# consistency object (default the job's own, BSP; e.g.
# '{ "model": "SSP", "staleness": 1 }'). Durability MEMORY. Times are medians
# over REPS runs (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-one-worker.XXXXXX)}
BUILD_DIR=${BUILD_DIR:-build}
DEVICES=${DEVICES:-cpu}
MODELS=${MODELS:-mlp cnn}
REPS=${REPS:-1}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
OVERLAP=${OVERLAP:-true}
PREFETCH=${PREFETCH:-true}
mkdir -p "$OUT"
source scripts/lib/cluster.sh
if [ -x "$BUILD_DIR/client/psctl" ]; then PSCTL=$BUILD_DIR/client/psctl; else PSCTL=$BUILD_DIR/bin/psctl; fi
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT

# The Prometheus text of 127.0.0.1:PORT/metrics (curl, or bash's /dev/tcp
# where a bare GPU machine has no curl).
fetch_metrics() {
  if command -v curl >/dev/null; then
    curl -s "http://127.0.0.1:$1/metrics"
    return
  fi
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

target_of() { case $1 in mlp) echo "${TARGET_MLP:-0.88}" ;; cnn) echo "${TARGET_CNN:-0.91}" ;; esac; }
epochs_of() {
  case $1 in mlp) echo "${EPOCHS_MLP:-}" ;; cnn) echo "${EPOCHS_CNN:-}" ;; esac
}

# Seconds since midnight of a log line's "YYYY-MM-DDTHH:MM:SS.mmm" stamp.
log_seconds() { awk '{ split(substr($1, 12), t, ":"); print t[1] * 3600 + t[2] * 60 + t[3] }'; }

# One run: DEVICE MODEL RUN_DIR; appends a line of figures to RUN_DIR/row.
run_one() {
  local device=$1 model=$2 dir=$3 epochs
  mkdir -p "$dir"
  epochs=$(epochs_of "$model")
  sed -e "s|/usr/share/datasets/fashion-mnist|$DATA_DIR|" \
      -e 's/"num_workers": [0-9]*/"num_workers": 1/' \
      -e 's/"num_servers": [0-9]*/"num_servers": 1/' \
      -e 's/"durability": "[A-Z]*"/"durability": "MEMORY"/' \
      ${epochs:+-e "s/\"epochs\": [0-9]*/\"epochs\": $epochs/"} \
      ${CONSISTENCY:+-e "s/\"consistency\": {[^}]*}/\"consistency\": $CONSISTENCY/"} \
      "deploy/jobs/fashion-mnist-$model.json" >"$dir/job.json"
  CLUSTER_WORKER_ARGS=("--device=$device --overlap_push=$OVERLAP --prefetch_pull=$PREFETCH")
  cluster_start "$BUILD_DIR" "$dir" 1 1 >/dev/null
  "$PSCTL" --coordinator="$COORDINATOR" submit "$dir/job.json" --watch \
    >"$dir/watch.log" 2>&1 || { tail -n 5 "$dir/watch.log" "$dir/worker0.log" >&2; return 1; }
  fetch_metrics "$(cluster_port "$dir/worker0.ports" metrics_port)" >"$dir/metrics.txt"
  cluster_stop >/dev/null 2>&1 || true
  local start target
  start=$(grep -m1 'steps per epoch' "$dir/worker0.log" | log_seconds)
  target=$(target_of "$model")
  # Per epoch: seconds since the worker started training, test accuracy.
  grep ' test accuracy ' "$dir/worker0.log" | grep ': epoch ' |
    awk -v s="$start" '{ split(substr($1, 12), t, ":");
      print t[1] * 3600 + t[2] * 60 + t[3] - s, $NF }' >"$dir/epochs.txt"
  awk -v target="$target" '
    FNR == NR { if (!hit && $2 >= target) { hit = $1 } last = $1; acc = $2; next }
    $1 ~ /^ps_worker_(pull|push|push_blocked|compute|copy)_seconds_(sum|count)/ {
      name = $1; sub(/_seconds_.*/, "", name); sub(/^ps_worker_/, "", name)
      if ($1 ~ /direction="to_device"/) name = "to_device"
      if ($1 ~ /direction="to_host"/) name = "to_host"
      stat = ($1 ~ /_sum/) ? "sum" : "count"
      v[name, stat] = $2
    }
    $1 == "ps_worker_samples_total" { samples = $2 }
    END {
      split("pull to_device compute to_host push push_blocked", k, " ")
      line = ""
      for (i = 1; i <= 6; i++) line = line sprintf("%.3f ", 1e3 * v[k[i], "sum"] / v[k[i], "count"])
      printf "%s%.0f %s %.1f %.4f\n", line, samples / last,
        hit == "" ? "-" : sprintf("%.1f", hit), last, acc
    }' "$dir/epochs.txt" "$dir/metrics.txt" >>"$dir/../$device-$model.rows"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else print a[int((NR + 1) / 2)] }'; }

echo "| device | model | pull | to device | compute | to host | push | push blocked | samples/s | time to target (s) | train time (s) | final acc |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for device in $DEVICES; do
  for model in $MODELS; do
    rm -f "$OUT/$device-$model.rows"
    for rep in $(seq 1 "$REPS"); do
      run_one "$device" "$model" "$OUT/$device-$model-$rep"
    done
    row="| $device | $model (target $(target_of "$model"))"
    for col in $(seq 1 10); do
      value=$(awk -v c="$col" '{ print $c }' "$OUT/$device-$model.rows" | { grep -v '^-$' || true; } | median)
      row="$row | $value"
    done
    echo "$row |"
  done
done
echo "(milliseconds per step, medians of $REPS runs; logs in $OUT)" >&2

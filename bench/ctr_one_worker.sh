#!/usr/bin/env bash
# One CTR worker on each device (docs/benchmarks.md, "CTR: one worker on a
# GPU"): a local cluster of 1 coordinator, 1 server and 1 worker
# (ps-worker --device=DEVICE) trains deploy/jobs/criteo-ctr.json (durability
# MEMORY, batch BATCH) for one epoch on generated Criteo-format data; prints
# per device the worker's training seconds (first step to model upload),
# samples/s and the test AUC.
#
#   BUILD_DIR=build DEVICES="cpu gpu" ROWS=200000 bench/ctr_one_worker.sh [OUT_DIR]
#
# BUILD_DIR is a build tree or a folder made by ../shared/tools/gpu-bundle.sh
# (bench/gpu_pack.sh). DATA: a directory with train.tsv and test.tsv to use
# instead of generating ROWS rows with bench/criteo_gen.py.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-ctr-one-worker.XXXXXX)}
BUILD_DIR=${BUILD_DIR:-build}
DEVICES=${DEVICES:-cpu}
ROWS=${ROWS:-200000}
BATCH=${BATCH:-4096}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=${DATA:-$OUT/data}
[ -e "$DATA/train.tsv" ] || python3 bench/criteo_gen.py --out "$DATA" \
  --train_rows "$ROWS" --test_rows $((ROWS / 4)) --max_cardinality 1000000 >&2
source scripts/lib/cluster.sh
if [ -x "$BUILD_DIR/client/psctl" ]; then PSCTL=$BUILD_DIR/client/psctl; else PSCTL=$BUILD_DIR/bin/psctl; fi
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
# Seconds since midnight of a log line's "YYYY-MM-DDTHH:MM:SS.mmm" stamp.
log_seconds() { awk '{ split(substr($1, 12), t, ":"); print t[1] * 3600 + t[2] * 60 + t[3] }'; }

echo "| device | train s | samples/s | test AUC |"
echo "|---|---:|---:|---:|"
for device in $DEVICES; do
  dir=$OUT/$device
  mkdir -p "$dir"
  python3 bench/ctr_vs_pytorch.py job --data "$DATA" --batch "$BATCH" \
    --workers 1 --servers 1 --durability MEMORY >"$dir/job.json"
  CLUSTER_WORKER_ARGS=("--device=$device")
  cluster_start "$BUILD_DIR" "$dir" 1 1 >/dev/null
  "$PSCTL" --coordinator="$COORDINATOR" submit "$dir/job.json" --watch \
    >"$dir/watch.log" 2>&1 || { tail -n 5 "$dir/watch.log" "$dir/worker0.log" >&2; exit 1; }
  cluster_stop >/dev/null 2>&1 || true
  start=$(grep -m1 'steps per epoch' "$dir/worker0.log" | log_seconds)
  end=$(grep -m1 'uploaded the trained model' "$dir/worker0.log" | log_seconds)
  samples=$(grep -m1 'steps per epoch' "$dir/worker0.log" | sed 's/.* \([0-9]*\) samples,.*/\1/')
  auc=$(sed -n 's/^test auc \([0-9.]*\).*/\1/p' "$dir/watch.log" | tail -n 1)
  awk -v d="$device" -v s="$start" -v e="$end" -v n="$samples" -v a="$auc" \
    'BEGIN { printf "| %s | %.1f | %.0f | %s |\n", d, e - s, n / (e - s), a }'
done

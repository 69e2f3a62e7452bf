#!/usr/bin/env bash
# Sparse tables larger than the servers' memory (docs/benchmarks.md, "Sparse
# tables larger than the servers' memory"): the CTR job of
# bench/ctr_vs_pytorch.sh (26 tables of dim 16, row-wise Adagrad; 2 servers,
# 2 workers, BSP, one epoch; durability MEMORY, each table's expected_rows
# its distinct training ids) on Criteo-format data with many distinct ids,
#   - "unlimited": the servers without a budget (every row in memory);
#   - "budget":    each server with --sparse_memory_bytes=BUDGET;
#   - "empty":     the budgeted servers on a 1,024-row file, batch 64 (tables
#                  nearly empty): their peak RSS is the fixed overhead;
# ROUNDS rounds, alternating. Prints medians: worker 0's training time,
# test AUC, the largest server peak RSS (VmHWM), and the rows the servers
# held, the tier's hits and disk reads (from their metrics); each run's
# processes' CPU seconds go to OUT/r<round>-<system>/cpu.txt.
#
#   ROUNDS=3 TRAIN_ROWS=1000000 BUDGET=33554432 bench/ctr_tier.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-ctr-tier.XXXXXX)}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-2048}
TRAIN_ROWS=${TRAIN_ROWS:-1000000}
TEST_ROWS=${TEST_ROWS:-100000}
BUDGET=${BUDGET:-33554432}
BUILD_DIR=${BUILD_DIR:-build}
GEN_ARGS=${GEN_ARGS:---min_cardinality 1000 --max_cardinality 50000000 --zipf_s 0.8}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=${DATA:-$OUT/data}
if [ ! -e "$DATA/teacher.json" ]; then
  # shellcheck disable=SC2086  # GEN_ARGS are meant to split
  "$PY" bench/criteo_gen.py --out "$DATA" --train_rows "$TRAIN_ROWS" \
    --test_rows "$TEST_ROWS" $GEN_ARGS >&2
fi
if [ ! -e "$OUT/empty/teacher.json" ]; then
  # shellcheck disable=SC2086
  "$PY" bench/criteo_gen.py --out "$OUT/empty" --train_rows 1024 \
    --test_rows 512 $GEN_ARGS >&2
fi
source scripts/lib/cluster.sh
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# Sums a metric family over the servers' /metrics.
scrape() {
  local family=$1 name port total=0 v
  while read -r name port; do
    case $name in server*) ;; *) continue ;; esac
    v=$("$PY" -c "import urllib.request,sys
t=urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode()
print(int(sum(float(l.split()[-1]) for l in t.splitlines() if l.startswith('$family{'))))")
    total=$((total + v))
  done < <(cluster_metrics_ports)
  echo "$total"
}

# SYSTEM (unlimited | budget | empty), ROUND.
run() {
  local system=$1 round=$2 dir data=$DATA batch=$BATCH
  dir=$OUT/r$round-$system
  mkdir -p "$dir"
  [ "$system" = empty ] && data=$OUT/empty batch=64
  "$PY" bench/ctr_vs_pytorch.py job --data "$data" --batch "$batch" |
    "$PY" bench/ctr_tier.py job --teacher "$DATA/teacher.json" >"$dir/job.json"
  CLUSTER_SERVER_ARGS=""
  [ "$system" != unlimited ] && CLUSTER_SERVER_ARGS="--sparse_memory_bytes=$BUDGET"
  export CLUSTER_SERVER_ARGS
  cluster_start "$BUILD_DIR" "$dir" 2 2 >/dev/null
  cluster_submit_and_wait "$dir/job.json" "$dir" >/dev/null || return 1
  cluster_peak_rss >"$dir/rss.txt"
  cluster_cpu_seconds >"$dir/cpu.txt"
  local rows hits misses reads memory
  rows=$(scrape ps_sparse_rows)
  memory=$(scrape ps_sparse_memory_bytes)
  hits=$(scrape ps_sparse_tier_hits_total)
  misses=$(scrape ps_sparse_tier_misses_total)
  reads=$(scrape ps_sparse_tier_disk_reads_total)
  echo "ctr_tier: $system: rows $rows, row memory $memory bytes, tier hits $hits, misses $misses, disk reads $reads" >&2
  cluster_stop >/dev/null 2>&1 || true
  "$PY" bench/ctr_tier.py record --status "$dir/status.json" --system "$system" \
    --worker_log "$dir/worker0.log" --rss "$dir/rss.txt" --round "$round" \
    --rows "$rows" --memory "$memory" >>"$RESULTS"
}

for round in $(seq 1 "$ROUNDS"); do
  for system in ${SYSTEMS:-unlimited budget empty}; do
    echo "ctr_tier: round $round/$ROUNDS: $system" >&2
    run "$system" "$round"
    tail -n 1 "$RESULTS" >&2
  done
done
echo "CTR, $(wc -l <"$DATA/train.tsv") training rows, 1 epoch, medians of $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" bench/ctr_tier.py table "$RESULTS" --budget "$BUDGET" | tee "$OUT/table.md"
echo "results and logs: $OUT" >&2

#!/usr/bin/env bash
# Where the README job's CPU goes on one host (docs/benchmarks.md, "The README
# job on one host: where a step's CPU goes"): deploy/jobs/fashion-mnist-mlp.json
# (BSP, DURABILITY, 2 servers, 2 CPU workers) for EPOCHS epochs on a fresh
# local cluster, with `perf record -g` (PERF=1) and `perf stat` (context
# switches, CPU clock) attached to every process for PERF_SECONDS from worker
# 0's first step. Prints, in Markdown:
#   - per process: CPU seconds over the training, CPU ms per clock, and
#     perf stat's context switches per clock;
#   - worker 0's step split from its metrics: pull waited, compute, push
#     waited, per step;
#   - the hottest symbols of each process (perf report, self time).
#
#   EPOCHS=3 bench/readme_profile.sh [OUT_DIR]
#
# BUILD_DIR: the build tree (default build). PERF=0 skips perf record (CPU
# seconds, perf stat and the metrics only). TOP: symbols listed (25).
# CALL_GRAPH: perf record's --call-graph (fp; dwarf gives whole stacks
# through libraries built without frame pointers, at a higher cost).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-readme-profile.XXXXXX)}
BUILD_DIR=${BUILD_DIR:-build}
EPOCHS=${EPOCHS:-3}
DURABILITY=${DURABILITY:-WAL}
PERF=${PERF:-1}
PERF_SECONDS=${PERF_SECONDS:-8}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source scripts/lib/cluster.sh
source bench/lib/profile.sh
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
PSCTL=$BUILD_DIR/client/psctl

sed -e "s|/usr/share/datasets/fashion-mnist|$DATA_DIR|" \
    -e "s/\"epochs\": [0-9]*/\"epochs\": $EPOCHS/" \
    -e "s/\"durability\": \"[A-Z]*\"/\"durability\": \"$DURABILITY\"/" \
    deploy/jobs/fashion-mnist-mlp.json >"$OUT/job.json"
cluster_start "$BUILD_DIR" "$OUT" 2 2 >/dev/null
cluster_cpu_seconds >"$OUT/cpu_submit.txt"
"$PSCTL" --coordinator="$COORDINATOR" submit "$OUT/job.json" --watch \
  >"$OUT/watch.log" 2>&1 &
watch_pid=$!
profile_wait_first_step "$OUT" 0.1
cluster_cpu_seconds >"$OUT/cpu_start.txt"
if [ "$PERF" = 1 ]; then
  profile_perf_record "$OUT" "$PERF_SECONDS" 499 "*" --call-graph "${CALL_GRAPH:-fp}"
fi
profile_perf_stat "$OUT" "$PERF_SECONDS"
wait "$watch_pid" || { tail -n 5 "$OUT/watch.log" >&2; exit 1; }
cluster_cpu_seconds >"$OUT/cpu_end.txt"
profile_wait_perf
profile_scrape_metrics "$OUT"
NAMES=("${CLUSTER_NAMES[@]}")
cluster_stop >/dev/null 2>&1 || true

profile_read_worker0_log "$OUT"
start=$PROFILE_START
end=$PROFILE_END
steps=$((PROFILE_STEPS_PER_EPOCH * EPOCHS))
train=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }')
echo "README job: $EPOCHS epochs, $DURABILITY, $steps clocks; train $train s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| process | CPU s (training) | CPU ms / clock | context switches / clock (perf stat, ${PERF_SECONDS} s) |"
echo "|---|---:|---:|---:|"
for name in "${NAMES[@]}"; do
  s0=$(awk -v n="$name" '$1 == n { print $2 }' "$OUT/cpu_start.txt")
  s1=$(awk -v n="$name" '$1 == n { print $2 }' "$OUT/cpu_end.txt")
  cs=$(awk '/context-switches/ { gsub(",", "", $1); print $1 }' "$OUT/$name.stat")
  awk -v n="$name" -v a="$s0" -v b="$s1" -v c="$steps" -v cs="${cs:-0}" \
    -v ps="$PERF_SECONDS" -v t="$train" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.1f |\n", n, b - a, 1000 * (b - a) / c, cs / (c * ps / t) }'
done
total=$(join <(sort "$OUT/cpu_start.txt") <(sort "$OUT/cpu_end.txt") | awk '{ s += $3 - $2 } END { printf "%.2f", s }')
echo "| all | $total | $(awk -v s="$total" -v c="$steps" 'BEGIN { printf "%.2f", 1000 * s / c }') | |"
echo
echo "| worker | step ms | pull waited ms | compute ms | push waited ms | rest ms |"
echo "|---|---:|---:|---:|---:|---:|"
for w in worker0 worker1; do
  f=$OUT/$w.metrics
  n=$(metric_total ps_worker_steps_total "$f")
  awk -v w="$w" -v n="$n" -v t="$train" \
    -v pl="$(metric_total ps_worker_pull_seconds_sum "$f")" \
    -v co="$(metric_total ps_worker_compute_seconds_sum "$f")" \
    -v pb="$(metric_total ps_worker_push_blocked_seconds_sum "$f")" \
    'BEGIN { if (n == 0) n = 1; printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", w, 1000 * t / n, 1000 * pl / n, 1000 * co / n, 1000 * pb / n, 1000 * (t - pl - co - pb) / n }'
done
if [ "$PERF" = 1 ]; then
  for name in "${NAMES[@]}"; do
    profile_hot_symbols "$OUT" "$name" dso,sym 120
  done
fi
echo "results and logs: $OUT" >&2

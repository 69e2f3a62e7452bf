#!/usr/bin/env bash
# Where a CTR step's time goes (docs/benchmarks.md, "CTR: where a step
# goes"): the job of bench/ctr_vs_pytorch.sh (deploy/jobs/criteo-ctr.json,
# BSP, WAL, 2 servers, 2 CPU workers of batch BATCH, one epoch) on DATA, with
# `perf record` attached to every server and worker for PERF_SECONDS of the
# epoch (from worker 0's first step). Prints, in Markdown:
#   - per process: CPU seconds over the epoch, and its peak resident memory;
#   - worker 0's step split from its metrics: pull (waiting for the
#     parameters), compute, push (waited for), per step, and bytes per step;
#   - per server: store bytes written per clock (the update log);
#   - the hottest symbols of each process (perf report, self time).
#
#   DATA=/tmp/ctr-1m bench/ctr_profile.sh [OUT_DIR]
#
# BUILD_DIR: the build tree (default build). PERF=0 skips perf (CPU
# seconds and the metrics only). JOB_ARGS: extra arguments for
# bench/ctr_vs_pytorch.py job (e.g. "--durability MEMORY"). PERF_FREQ
# (default 199), PERF_WHO (default "server*|worker*") and PERF_CALL_GRAPH
# (default -g: frame pointers, which these builds do not keep, so callers
# are mostly lost; "--call-graph dwarf,8192" gives whole stacks, e.g. with
# PERF_WHO=server0) choose what perf records.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-ctr-profile.XXXXXX)}
BUILD_DIR=${BUILD_DIR:-build}
BATCH=${BATCH:-2048}
PERF=${PERF:-1}
PERF_SECONDS=${PERF_SECONDS:-15}
: "${DATA:?set DATA to a directory of bench/criteo_gen.py output}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source scripts/lib/cluster.sh
source bench/lib/profile.sh
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
PSCTL=$BUILD_DIR/client/psctl

# shellcheck disable=SC2086  # JOB_ARGS are meant to split
/usr/bin/python3 bench/ctr_vs_pytorch.py job --data "$DATA" --batch "$BATCH" \
  ${JOB_ARGS:-} >"$OUT/job.json"
cluster_start "$BUILD_DIR" "$OUT" 2 2 >/dev/null
"$PSCTL" --coordinator="$COORDINATOR" submit "$OUT/job.json" --watch \
  >"$OUT/watch.log" 2>&1 &
watch_pid=$!
profile_wait_first_step "$OUT" 0.2
cluster_cpu_seconds >"$OUT/cpu_start.txt"
if [ "$PERF" = 1 ]; then
  # shellcheck disable=SC2086  # PERF_CALL_GRAPH is meant to split
  profile_perf_record "$OUT" "$PERF_SECONDS" "${PERF_FREQ:-199}" \
    "${PERF_WHO:-server*|worker*}" ${PERF_CALL_GRAPH:--g}
fi
wait "$watch_pid" || { tail -n 5 "$OUT/watch.log" >&2; exit 1; }
cluster_cpu_seconds >"$OUT/cpu_end.txt"
profile_wait_perf
: >"$OUT/rss.txt"
for i in "${!CLUSTER_NAMES[@]}"; do
  awk -v n="${CLUSTER_NAMES[$i]}" '/^VmHWM/ { printf "%s %.0f\n", n, $2 / 1024 }' \
    "/proc/${CLUSTER_PIDS[$i]}/status" >>"$OUT/rss.txt"
done
profile_scrape_metrics "$OUT"
cluster_stop >/dev/null 2>&1 || true

profile_read_worker0_log "$OUT"
start=$PROFILE_START
end=$PROFILE_END
steps=$PROFILE_STEPS_PER_EPOCH
auc=$(sed -n 's/^test auc \([0-9.]*\).*/\1/p' "$OUT/watch.log" | tail -n 1)
echo "CTR profile: $(wc -l <"$DATA/train.tsv") rows, batch $BATCH, $steps steps; train $(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }') s; test AUC $auc; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| process | CPU s (epoch) | CPU ms / step | peak RSS MiB |"
echo "|---|---:|---:|---:|"
join <(sort "$OUT/cpu_start.txt") <(sort "$OUT/cpu_end.txt") | join - <(sort "$OUT/rss.txt") |
  awk -v n="$steps" '{ printf "| %s | %.1f | %.1f | %d |\n", $1, $3 - $2, 1000 * ($3 - $2) / n, $4 }'
echo
metric_sum() { metric_total "$1_sum" "$2"; }
metric_count() { metric_total "$1_count" "$2"; }
# A CTR step's compute is not in ps_worker_compute_seconds (the CTR model
# keeps no StepTiming): it is the step's time less the waits for its pull
# and push (the batch's read and deduplication included).
echo "| worker | step ms | pull waited ms | push waited ms | compute and rest ms | push whole ms | pull KB/step | push KB/step |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for w in worker0 worker1; do
  f=$OUT/$w.metrics
  n=$(metric_count ps_worker_pull_seconds "$f")
  awk -v w="$w" -v n="$n" -v pl="$(metric_sum ps_worker_pull_seconds "$f")" \
    -v t="$(awk -v s="$start" -v e="$end" 'BEGIN { print e - s }')" \
    -v pb="$(metric_sum ps_worker_push_blocked_seconds "$f")" \
    -v pw="$(metric_sum ps_worker_push_seconds "$f")" \
    -v bi="$(metric_total ps_worker_pull_bytes_total "$f")" \
    -v bo="$(metric_total ps_worker_push_bytes_total "$f")" \
    'BEGIN { if (n == 0) n = 1; printf "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f |\n", w, 1000 * t / n, 1000 * pl / n, 1000 * pb / n, 1000 * (t - pl - pb) / n, 1000 * pw / n, bi / n / 1000, bo / n / 1000 }'
done
echo
echo "| server | store MB written / clock | pull wait ms (mean) |"
echo "|---|---:|---:|"
for s in server0 server1; do
  f=$OUT/$s.metrics
  awk -v s="$s" -v n="$steps" -v b="$(metric_total ps_store_written_bytes_total "$f")" \
    -v ws="$(metric_sum ps_pull_wait_seconds "$f")" -v wc="$(metric_count ps_pull_wait_seconds "$f")" \
    'BEGIN { if (wc == 0) wc = 1; printf "| %s | %.2f | %.1f |\n", s, b / n / 1e6, 1000 * ws / wc }'
done
if [ "$PERF" = 1 ]; then
  for name in server0 worker0; do
    profile_hot_symbols "$OUT" "$name" sym 110
  done
fi
echo "results and logs: $OUT" >&2

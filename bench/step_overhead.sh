#!/usr/bin/env bash
# Per-step overhead of the parameter-server path for the Fashion-MNIST MLP
# (docs/benchmarks.md): a local cluster (1 coordinator, 2 servers, 2 workers),
# deploy/jobs/fashion-mnist-mlp.json with EPOCHS epochs (default 2), then the
# workers' ps_worker_{pull,push,push_blocked,compute}_seconds histograms
# scraped at the end: mean pull, push, push waited for, and compute per step,
# and (pull+blocked)/(pull+blocked+compute): the share of a step spent on
# the parameter-server path (a push overlaps the next step unless OVERLAP=false,
# so only the part waited for counts; the pull is what the step waited for,
# the next step's pull being made during this step's compute unless
# PREFETCH=false).
#
#   BUILD_DIR=build-p bench/step_overhead.sh [OUT_DIR]   (EPOCHS=2 DURABILITY=WAL CONSISTENCY=BSP OVERLAP=true PREFETCH=true)
#
# Uses the executables already in BUILD_DIR (ps-coordinator ps-server ps-worker
# psctl); build them first.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-overhead.XXXXXX)}
EPOCHS=${EPOCHS:-2}
DURABILITY=${DURABILITY:-WAL}
CONSISTENCY=${CONSISTENCY:-BSP}  # BSP (the job's own) or ASP: no barrier wait
BUILD_DIR=${BUILD_DIR:-build}
OVERLAP=${OVERLAP:-true}
PREFETCH=${PREFETCH:-true}
mkdir -p "$OUT"
source scripts/lib/cluster.sh
CLUSTER_WORKER_ARGS=("--overlap_push=$OVERLAP --prefetch_pull=$PREFETCH"
  "--overlap_push=$OVERLAP --prefetch_pull=$PREFETCH")
sed -e "s/\"epochs\": [0-9]*/\"epochs\": $EPOCHS/" \
    -e "s/\"durability\": \"[A-Z]*\"/\"durability\": \"$DURABILITY\"/" \
    -e "s/\"consistency\": {[^}]*}/\"consistency\": { \"model\": \"$CONSISTENCY\" }/" \
    deploy/jobs/fashion-mnist-mlp.json >"$OUT/job.json"
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
cluster_start "$BUILD_DIR" "$OUT" 2 2 >/dev/null
start=$(date +%s.%N)
"$(cluster_binary client psctl)" --coordinator="$COORDINATOR" submit "$OUT/job.json" --watch \
  >"$OUT/watch.log" 2>&1 || true
end=$(date +%s.%N)
tail -n 3 "$OUT/watch.log" >&2
: >"$OUT/metrics.txt"
while read -r name port; do
  case $name in worker*) ;; *) continue ;; esac
  curl -s "http://127.0.0.1:$port/metrics" | sed "s/^/$name /" >>"$OUT/metrics.txt"
done < <(cluster_metrics_ports)
awk -v wall="$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" '
  $2 ~ /^ps_worker_(pull|push|push_blocked|compute)_seconds_(sum|count)/ {
    split($2, p, "_seconds_"); kind = substr(p[1], 11); stat = p[2]
    sub(/\{.*/, "", stat)
    v[kind, stat] += $3
  }
  END {
    pull = v["pull", "sum"] / v["pull", "count"]
    push = v["push", "sum"] / v["push", "count"]
    blocked = v["push_blocked", "sum"] / v["push_blocked", "count"]
    comp = v["compute", "sum"] / v["compute", "count"]
    printf "steps (both workers): pull %d, push %d, compute %d; job wall %.1f s\n",
      v["pull", "count"], v["push", "count"], v["compute", "count"], wall
    printf "| mean pull (ms) | mean push (ms) | push waited for (ms) | mean compute (ms) | (pull+waited)/(pull+waited+compute) | job wall (s) |\n"
    printf "|---:|---:|---:|---:|---:|---:|\n"
    printf "| %.2f | %.2f | %.2f | %.2f | %.1f%% | %.1f |\n", pull * 1e3, push * 1e3,
      blocked * 1e3, comp * 1e3, 100 * (pull + blocked) / (pull + blocked + comp), wall
  }' "$OUT/metrics.txt" | tee "$OUT/table.md"
echo "logs and metrics: $OUT" >&2

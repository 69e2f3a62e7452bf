#!/usr/bin/env bash
# The straggler experiment (docs/consistency.md): 4 workers, one slowed to twice
# its step time, staleness s in {0 (BSP), 1, 3, 10, ASP}; for each, time to reach
# 0.85 test accuracy, clocks per second, final accuracy after a fixed number of
# epochs, and the total time spent waiting on other workers (pulls waiting on
# the SSP bound, BSP pushes waiting for their clock), summed over servers. Each configuration runs
# REPEATS times (default 3) on a fresh local cluster; medians are reported.
#
#   bench/straggler.sh [OUT_DIR]      (EPOCHS=6 REPEATS=3 SLOWDOWN=2 CACHE=true
#                                      CONFIGS="SSP 3 s=3;..." to change)
#
# A run takes about 15 minutes on 2 cores with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-straggler.XXXXXX)}
EPOCHS=${EPOCHS:-6}
REPEATS=${REPEATS:-3}
SLOWDOWN=${SLOWDOWN:-2}
CACHE=${CACHE:-false}   # true: SSP workers keep a cache (consistency.worker_cache)
TARGET=${TARGET:-0.85}
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$OUT"
# SKIP_BUILD=1 uses the executables already in BUILD_DIR (e.g. a frozen copy).
[ -n "${SKIP_BUILD:-}" ] ||
  BUILD_DIR=$BUILD_DIR bash scripts/build.sh --target ps-coordinator ps-server ps-worker psctl >/dev/null
source scripts/lib/cluster.sh

# Writes the job spec of one configuration: MODEL STALENESS FILE.
write_job() {
  local model=$1 staleness=$2 file=$3 cache=""
  [ "$model" = SSP ] && [ "$CACHE" = true ] && cache=", \"worker_cache\": true"
  sed -e "s/\"epochs\": [0-9]*/\"epochs\": $EPOCHS/" \
      -e "s/\"num_workers\": [0-9]*/\"num_workers\": 4/" \
      -e "s/\"consistency\": {[^}]*}/\"consistency\": { \"model\": \"$model\", \"staleness\": $staleness$cache }/" \
      -e "s/\"durability\": \"[A-Z]*\"/\"durability\": \"MEMORY\"/" \
      deploy/jobs/fashion-mnist-mlp.json >"$file"
}

# Runs one configuration once; prints "seconds_to_target clocks_per_s final_acc pull_wait_s".
run_one() {
  local model=$1 staleness=$2 run=$3 dir
  dir="$OUT/$run"
  rm -rf "$dir"
  mkdir -p "$dir"
  write_job "$model" "$staleness" "$dir/job.json"
  CLUSTER_WORKER_ARGS=([3]="--slowdown=$SLOWDOWN")
  cluster_start "$BUILD_DIR" "$dir" 2 4 >/dev/null
  local start
  start=$(date +%s.%N)
  "$BUILD_DIR/client/psctl" --coordinator="$COORDINATOR" submit "$dir/job.json" --watch |
    while IFS= read -r line; do echo "$(date +%s.%N) $line"; done >"$dir/watch.log" || true
  local wait_total=0 name port value
  while read -r name port; do
    case $name in server*) ;; *) continue ;; esac
    # Pulls wait on the SSP bound; under BSP pushes wait for their clock.
    value=$(curl -s "http://127.0.0.1:$port/metrics" |
      awk '/^ps_(pull|push)_wait_seconds_sum/ {t += $2} END {print t + 0}')
    wait_total=$(awk -v a="$wait_total" -v b="${value:-0}" 'BEGIN {print a + b}')
  done < <(cluster_metrics_ports)
  cluster_stop >/dev/null 2>&1 || true
  awk -v start="$start" -v target="$TARGET" -v wait="$wait_total" '
    /test acc/ {
      for (i = 1; i <= NF; i++) if ($i == "acc") acc = $(i + 1)
      if (reached == "" && acc + 0 >= target) reached = $1 - start
    }
    /SUCCEEDED after/ { for (i = 1; i <= NF; i++) if ($i == "after") secs = $(i + 1) }
    /test accuracy:/ { final = $4 }
    /epoch [0-9]+\/[0-9]+ \[/ { line = $0 }
    END {
      if (reached == "") reached = "inf"
      printf "%s %s %s %.2f\n", reached, secs, final, wait
    }' "$dir/watch.log"
}

median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "nan"; else print a[int((NR + 1) / 2)]}'; }

configs=("BSP 0 s=0(BSP)" "SSP 1 s=1" "SSP 3 s=3" "SSP 10 s=10" "ASP 0 s=inf(ASP)")
# CONFIGS="SSP 3 s=3;SSP 10 s=10" runs only those.
if [ -n "${CONFIGS:-}" ]; then IFS=';' read -r -a configs <<<"$CONFIGS"; fi
total_clocks=$(( 60000 / 4 / 64 * EPOCHS ))
printf "| staleness | time to %s acc (s) | clocks/s | final acc (%d epochs) | wait (s) |\n" "$TARGET" "$EPOCHS" | tee "$OUT/table.md"
printf "| --- | --- | --- | --- | --- |\n" | tee -a "$OUT/table.md"
for config in "${configs[@]}"; do
  read -r model staleness label <<<"$config"
  : >"$OUT/$label.runs"
  for r in $(seq 1 "$REPEATS"); do
    result=$(run_one "$model" "$staleness" "$label-$r")
    echo "$result" >>"$OUT/$label.runs"
    echo "  $label run $r: $result (to-target s, wall s, final acc, pull wait s)" >&2
  done
  to_target=$(awk '{print $1}' "$OUT/$label.runs" | median)
  wall=$(awk '{print $2}' "$OUT/$label.runs" | median)
  final=$(awk '{print $3}' "$OUT/$label.runs" | median)
  wait=$(awk '{print $4}' "$OUT/$label.runs" | median)
  rate=$(awk -v c="$total_clocks" -v w="$wall" 'BEGIN {printf "%.1f", c / w}')
  printf "| %s | %s | %s | %s | %s |\n" "$label" "$to_target" "$rate" "$final" "$wait" | tee -a "$OUT/table.md"
done
echo "runs and logs: $OUT" >&2

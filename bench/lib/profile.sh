# shellcheck shell=bash
# Functions shared by the profiles of a job on a local cluster
# (bench/readme_profile.sh, bench/ctr_profile.sh): wait for worker 0's first
# step, attach perf to the cluster's processes, read their metrics, and turn
# worker 0's log and the metrics into figures. Source it after
# scripts/lib/cluster.sh and after cluster_start (it reads CLUSTER_NAMES,
# CLUSTER_PIDS and CLUSTER_RUN_DIR):
#
#   source scripts/lib/cluster.sh
#   source bench/lib/profile.sh
#   cluster_start "$BUILD_DIR" "$OUT" 2 2
#   ... submit the job ...
#   profile_wait_first_step "$OUT" 0.1
#   profile_perf_record "$OUT" 15 199 -g "server*|worker*"
#   ... wait for the job ...
#   profile_wait_perf
#   profile_scrape_metrics "$OUT"
#
# The perf runs it starts; profile_wait_perf waits for them.
PROFILE_PERF_PIDS=()

# Waits until worker 0 logs its first step ("steps per epoch" in
# OUT/worker0.log), polling every INTERVAL seconds, 600 times at most.
profile_wait_first_step() {
  local out=$1 interval=$2
  for _ in $(seq 1 600); do
    grep -q 'steps per epoch' "$out/worker0.log" 2>/dev/null && return 0
    sleep "$interval"
  done
}

# Attaches `perf record -F FREQ CALL_GRAPH_ARGS... -p PID` for SECONDS to
# every process of the cluster whose name matches the shell pattern PATTERN
# (e.g. "server*|worker*"; "*": all), writing OUT/NAME.perf, in the
# background.
profile_perf_record() {
  local out=$1 seconds=$2 freq=$3 pattern=$4 i name alt matched
  local -a alternatives
  shift 4
  # A '|' in a pattern held by a variable is no alternation to `case`:
  # each alternative is tried on its own.
  IFS='|' read -ra alternatives <<<"$pattern"
  for i in "${!CLUSTER_NAMES[@]}"; do
    name=${CLUSTER_NAMES[$i]}
    matched=0
    for alt in "${alternatives[@]}"; do
      # shellcheck disable=SC2254  # the pattern is meant to match
      case $name in $alt) matched=1 ;; esac
    done
    [ "$matched" = 1 ] || continue
    perf record -F "$freq" "$@" -p "${CLUSTER_PIDS[$i]}" -o "$out/$name.perf" \
      -- sleep "$seconds" >/dev/null 2>&1 &
    PROFILE_PERF_PIDS+=($!)
  done
}

# Attaches `perf stat` (task clock, context switches, CPU migrations, page
# faults) for SECONDS to every process of the cluster, writing
# OUT/NAME.stat, in the background.
profile_perf_stat() {
  local out=$1 seconds=$2 i
  for i in "${!CLUSTER_NAMES[@]}"; do
    perf stat -e task-clock,context-switches,cpu-migrations,page-faults \
      -p "${CLUSTER_PIDS[$i]}" -o "$out/${CLUSTER_NAMES[$i]}.stat" \
      -- sleep "$seconds" >/dev/null 2>&1 &
    PROFILE_PERF_PIDS+=($!)
  done
}

# Waits for the perf runs started above (a failed one is ignored).
profile_wait_perf() {
  local pid
  for pid in "${PROFILE_PERF_PIDS[@]}"; do wait "$pid" || true; done
  PROFILE_PERF_PIDS=()
}

# Writes every process's /metrics to OUT/NAME.metrics.
profile_scrape_metrics() {
  local out=$1 name port
  for name in "${CLUSTER_NAMES[@]}"; do
    port=$(cluster_port "$CLUSTER_RUN_DIR/$name.ports" metrics_port)
    curl -s "http://127.0.0.1:$port/metrics" >"$out/$name.metrics" || true
  done
}

# Seconds since midnight of a log line's stamp (stdin to stdout).
log_seconds() { awk '{ split(substr($1, 12), t, ":"); print t[1] * 3600 + t[2] * 60 + t[3] }'; }

# Worker 0's training, from OUT/worker0.log: sets PROFILE_START and
# PROFILE_END (seconds since midnight of its first step and of its model's
# upload) and PROFILE_STEPS_PER_EPOCH.
# shellcheck disable=SC2034  # read by the scripts that source this file
profile_read_worker0_log() {
  local log=$1/worker0.log
  PROFILE_START=$(grep -m1 'steps per epoch' "$log" | log_seconds)
  PROFILE_END=$(grep -m1 'uploaded the trained model' "$log" | log_seconds)
  PROFILE_STEPS_PER_EPOCH=$(grep -m1 'steps per epoch' "$log" |
    sed 's/.* \([0-9]*\) steps per epoch.*/\1/')
}

# A metric's value summed over its label sets: NAME FILE.
metric_total() {
  awk -v m="$1" '{ n = $1; sub(/\{.*/, "", n) } n == m { s += $NF } END { print s + 0 }' "$2"
}

# Prints, as a Markdown code block under a heading line, the TOP (default
# 25) hottest symbols of OUT/NAME.perf by self time, sorted by SORT (perf
# report's --sort), each line cut to WIDTH characters.
profile_hot_symbols() {
  local out=$1 name=$2 sort=$3 width=$4
  echo
  echo "$name: hottest symbols (self, % of its samples)"
  echo '```'
  perf report -i "$out/$name.perf" --no-children --sort "$sort" --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -n "${TOP:-25}" | cut -c1-"$width" || true
  echo '```'
}

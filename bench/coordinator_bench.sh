#!/usr/bin/env bash
# Runs ps-coordinator-bench builds one after the other, RUNS times each
# (interleaved, so that both see the same machine), and prints the median of
# each column per build and worker count (docs/benchmarks.md, "Coordinator").
#
#   bench/coordinator_bench.sh [RUNS] LABEL=BINARY [LABEL=BINARY ...]
#   e.g. bench/coordinator_bench.sh 3 before=/tmp/bench-before \
#          after=build/bench/ps-coordinator-bench
# Extra flags for the benchmark go in $BENCH_FLAGS (default:
# --workers=10,100,1000 --seconds=5).
set -euo pipefail
runs=3
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  runs=$1
  shift
fi
[[ $# -ge 1 ]] || { echo "usage: $0 [RUNS] LABEL=BINARY ..." >&2; exit 2; }
flags=${BENCH_FLAGS:---workers=10,100,1000 --seconds=5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= runs; r++)); do
  for spec in "$@"; do
    label=${spec%%=*}
    binary=${spec#*=}
    # shellcheck disable=SC2086
    "$binary" $flags 2>/dev/null | awk -v l="$label" 'NR > 1 { print l, $0 }' \
      >>"$out/rows"
  done
done
printf '%-8s %8s %9s %9s %9s %9s %10s %10s %9s %9s\n' build workers \
  get_p50 get_p99 list_p50 list_p99 report_p50 report_p99 reports/s fsyncs/s
# Median per (build, workers) of each column (ms suffixes dropped).
sed 's/ms//g' "$out/rows" | sort -k1,1 -k2,2n | awk '
  function median(col,   n, i, j, t, v) {
    n = split(vals[col], v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] + 0 > v[j] + 0; j--) {
      t = v[j]; v[j] = v[j-1]; v[j-1] = t
    }
    return v[int((n + 1) / 2)]
  }
  function flush() {
    if (key == "") return
    printf "%-8s %8s %9s %9s %9s %9s %10s %10s %9s %9s\n", b, w,
      median(3), median(4), median(5), median(6), median(7), median(8),
      median(9), median(10)
    delete vals
  }
  {
    k = $1 " " $2
    if (k != key) { flush(); key = k; b = $1; w = $2 }
    for (c = 3; c <= NF; c++) vals[c] = vals[c] " " $c
  }
  END { flush() }'

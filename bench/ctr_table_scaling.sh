#!/usr/bin/env bash
# Scaling with the table (issue 27's goal: "growing the id space 10x, same
# rows per batch, changes bytes per step by < 10 % and step time by < 20 %";
# docs/benchmarks.md, "CTR: scaling with the table"): the same CTR job
# (bench/ctr_profile.sh's: 2 servers, 2 workers of batch 2048, BSP, WAL, one
# epoch) on two data sets, alternated for ROUNDS rounds:
#   - small: one segment of 131,072 lines of bench/criteo_gen.py data
#     (cardinalities MIN_CARD..MAX_CARD, Zipf ZIPF), written 10 times
#     (1,310,720 rows; 10 passes over the same ids);
#   - large: the same 10 segments, segment s's ids moved to a copy s of the
#     id space of its own (bench/ctr_relabel.py): 10x the id space and 10x
#     the rows the servers end with, while every batch touches exactly as
#     many rows as the small run's batch at that step (a segment is one
#     shuffle window of each worker's shard, 65,536 samples, 32 batches: no
#     batch mixes segments, and the windows' orders are the same).
# MODE=natural: small is 10 segments of generated data, large the same with
#     segment s in copy s (10x the id space; the tables grow as much as the
#     segments' ids are distinct from each other's).
# MODE=cardinality instead generates the large data with every field's
# cardinality 10x (same seed): the id space grows 10x, but so do the rows a
# batch touches (the Zipf tail), which is not the goal's premise.
# Prints per data set the medians of: distinct ids per worker step, rows the
# servers hold at the end, bytes per step pulled and pushed by worker 0, and
# step time (worker 0's training time over its steps, its final evaluation
# included), and CPU per step of a server and of a worker (less sensitive
# than wall time to other load on the machine), the time a server's
# snapshots held the job's lock per step and its snapshots; then the
# large/small ratios.
#
#   ROUNDS=3 bench/ctr_table_scaling.sh [OUT_DIR]
#
# BUILD_DIR as for ctr_profile.sh. KEEP_DATA=1 keeps each run's cluster
# data directories (deleted after the run's figures are read by default).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-ctr-scaling.XXXXXX)}
ROUNDS=${ROUNDS:-3}
MODE=${MODE:-copies}
SEGMENT=131072  # 2 workers x 65,536 samples (CtrSampleStreamOptions.window).
ROWS=${ROWS:-$((10 * SEGMENT))}  # MODE=cardinality only.
MIN_CARD=${MIN_CARD:-10}
MAX_CARD=${MAX_CARD:-10000000}
ZIPF=${ZIPF:-0.9}
PY=/usr/bin/python3
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
gen() {  # DIR FACTOR
  [ -e "$1/teacher.json" ] ||
    "$PY" bench/criteo_gen.py --out "$1" --train_rows "$ROWS" \
      --test_rows 50000 --min_cardinality $((MIN_CARD * $2)) \
      --max_cardinality $((MAX_CARD * $2)) --zipf_s "$ZIPF" >&2
}
relabel() {  # OUT_DIR SOURCE_SEGMENTS COPIES
  [ -e "$1/teacher.json" ] && return
  mkdir -p "$1"
  "$PY" bench/ctr_relabel.py "$OUT/data-gen/train.tsv" "$1/train.tsv" \
    --segment_lines "$SEGMENT" --segments 10 --source_segments "$2" --copies "$3"
  cp "$OUT/data-gen/test.tsv" "$OUT/data-gen/teacher.json" "$1/"
}
case $MODE in
  cardinality)
    gen "$OUT/data-small" 1
    gen "$OUT/data-large" 10 ;;
  natural)
    ROWS=$((10 * SEGMENT)) gen "$OUT/data-gen" 1
    relabel "$OUT/data-small" 10 1
    relabel "$OUT/data-large" 10 10 ;;
  *)
    ROWS=$SEGMENT gen "$OUT/data-gen" 1
    relabel "$OUT/data-small" 1 1
    relabel "$OUT/data-large" 1 10 ;;
esac

# A metric's value summed over its label sets: NAME FILE.
metric_total() {
  awk -v m="$1" '{ n = $1; sub(/\{.*/, "", n) } n == m { s += $NF } END { print s + 0 }' "$2"
}
log_seconds() { awk '{ split(substr($1, 12), t, ":"); print t[1] * 3600 + t[2] * 60 + t[3] }'; }

: >"$OUT/results.txt"
for round in $(seq 1 "$ROUNDS"); do
  for size in small large; do
    dir=$OUT/r$round-$size
    echo "ctr_table_scaling: round $round/$ROUNDS: $size" >&2
    PERF=0 DATA=$OUT/data-$size bench/ctr_profile.sh "$dir" >"$dir.md" 2>/dev/null
    w=$dir/worker0.metrics
    steps=$(grep -m1 'steps per epoch' "$dir/worker0.log" | sed 's/.* \([0-9]*\) steps per epoch.*/\1/')
    start=$(grep -m1 'steps per epoch' "$dir/worker0.log" | log_seconds)
    end=$(grep -m1 'uploaded the trained model' "$dir/worker0.log" | log_seconds)
    # Ids per step: the keys of the servers' pulls and pushes, halved (a
    # step pulls and pushes the same ids), over both workers' steps (worker
    # 0's evaluation pulls add a little).
    rows=0
    for s in server0 server1; do
      rows=$(awk -v r="$rows" -v a="$(metric_total ps_sparse_rows "$dir/$s.metrics")" 'BEGIN { print r + a }')
    done
    # CPU seconds over the epoch (cpu_end - cpu_start), servers and workers.
    cpu() {
      join <(sort "$dir/cpu_start.txt") <(sort "$dir/cpu_end.txt") |
        awk -v p="$1" 'index($1, p) == 1 { s += $3 - $2 } END { print s + 0 }'
    }
    awk -v size="$size" -v n="$steps" -v s="$start" -v e="$end" -v rows="$rows" \
      -v cs="$(cpu server)" -v cw="$(cpu worker)" \
      -v pull="$(metric_total ps_worker_pull_bytes_total "$w")" \
      -v push="$(metric_total ps_worker_push_bytes_total "$w")" \
      -v k0="$(metric_total ps_sparse_keys_per_request_sum "$dir/server0.metrics")" \
      -v k1="$(metric_total ps_sparse_keys_per_request_sum "$dir/server1.metrics")" \
      -v l0="$(metric_total ps_snapshot_lock_seconds_sum "$dir/server0.metrics")" \
      -v l1="$(metric_total ps_snapshot_lock_seconds_sum "$dir/server1.metrics")" \
      -v n0="$(metric_total ps_snapshots_total "$dir/server0.metrics")" \
      -v n1="$(metric_total ps_snapshots_total "$dir/server1.metrics")" \
      'BEGIN { printf "%s %.1f %.0f %.0f %.0f %.2f %.2f %.2f %.2f %.1f\n", size, (k0 + k1) / 2 / 2 / n, rows, pull / n, push / n, 1000 * (e - s) / n, 1000 * cs / 2 / n, 1000 * cw / 2 / n, 1000 * (l0 + l1) / 2 / n, (n0 + n1) / 2 }' \
      >>"$OUT/results.txt"
    tail -n 1 "$OUT/results.txt" >&2
    # The run's data directories go (KEEP_DATA=1 keeps them): a large run
    # leaves ~1.5 GB (update logs, rows files), and the page cache of the
    # runs before slowed every later large run on the shared VM (server CPU
    # per step 17 -> 21.6 ms over 7 rounds, the small runs unchanged;
    # docs/benchmarks.md, "Rounds that leave their data behind").
    [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$dir"/*.data
  done
done
echo "CTR scaling with the table ($MODE): $ROWS training rows, batch ${BATCH:-2048} per worker, medians of $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT/results.txt" "$MIN_CARD" "$MAX_CARD" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
lo, hi = int(sys.argv[2]), int(sys.argv[3])
med = {}
for size in ("small", "large"):
    cols = [[float(x) for x in r[1:]] for r in rows if r[0] == size]
    med[size] = [statistics.median(c) for c in zip(*cols)]
names = ["ids per step (a worker's, deduplicated)", "rows on the servers at the end",
         "pull bytes per step (worker 0)", "push bytes per step (worker 0)",
         "step ms (wall)", "server CPU ms per step (each)",
         "worker CPU ms per step (each)",
         "snapshot lock ms per step (a server's)", "snapshots (a server's)"]
print()
print(f"| | small (cardinalities {lo:,}..{hi:,}) | large (id space x10) | ratio |")
print("|---|---:|---:|---:|")
for i, name in enumerate(names):
    a, b = med["small"][i], med["large"][i]
    ratio = f"{b / a:.3f}" if a else "—"  # A build without the metric: 0.
    print(f"| {name} | {a:,.1f} | {b:,.1f} | {ratio} |")
EOF
echo "results and logs: $OUT" >&2

#!/usr/bin/env bash
# Sparse tables against PyTorch on a CTR job (docs/benchmarks.md, "CTR
# against PyTorch"): Criteo-format data from bench/criteo_gen.py (a hidden
# logistic teacher, so the best achievable AUC is known), the DLRM-style model
# of deploy/jobs/criteo-ctr.json (26 tables of dim 16, row-wise Adagrad 0.05;
# bottom MLP 64-16, DOT, top MLP 64-32; dense Adagrad 0.01), one epoch,
# trained
#   - by our cluster: 1 coordinator, 2 servers, 2 CPU workers (BSP, WAL),
#     batch BATCH per worker;
#   - by PyTorch DDP (gloo, 2 processes, batch BATCH each, one fused
#     nn.EmbeddingBag(sparse=True), the full tables in each process);
#   - by one PyTorch process with batch 2 * BATCH (single);
#   - by one PyTorch process replaying our cluster's run exactly
#     (single-same: batch 2 * BATCH, the global batch of step s being worker
#     0's batch s then worker 1's, from our servers' initial rows and dense
#     values: bench/ctr_torch.py --replay_job, needs BUILD_DIR's
#     ps-ctr-replay-state), so that it differs from ours only by float
#     summation order;
# in one sitting: ROUNDS rounds, each running every system once. Prints a
# Markdown table of medians: training time (ours: worker 0's log, from its
# first step to its model upload, so without loading the data; PyTorch: its
# own train_seconds), test AUC and log loss, the largest worker's peak
# resident memory, ratios to DDP, and each system's AUC minus ours.
#
#   ROUNDS=3 TRAIN_ROWS=4000000 TEST_ROWS=500000 bench/ctr_vs_pytorch.sh [OUT_DIR]
#   ROUNDS=1 TRAIN_ROWS=200000 TEST_ROWS=50000 bench/ctr_vs_pytorch.sh  # smoke
#
# GEN_ARGS adds bench/criteo_gen.py options (e.g. "--max_cardinality
# 50000000 --zipf_s 0.9" for more distinct ids); DATA (a directory holding
# train.tsv, test.tsv and teacher.json) reuses generated data; TORCH_ARGS
# adds bench/ctr_torch.py options to the PyTorch systems (e.g.
# "--unseen_rows zeros", the baseline before 2026-11-27). Uses the
# executables in BUILD_DIR (build first).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-ctr-vs-pytorch.XXXXXX)}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-2048}
TRAIN_ROWS=${TRAIN_ROWS:-4000000}
TEST_ROWS=${TEST_ROWS:-500000}
BUILD_DIR=${BUILD_DIR:-build}
SYSTEMS=${SYSTEMS:-ours ddp single single-same}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DATA=${DATA:-$OUT/data}
if [ ! -e "$DATA/teacher.json" ]; then
  # shellcheck disable=SC2086  # GEN_ARGS are meant to split
  "$PY" bench/criteo_gen.py --out "$DATA" --train_rows "$TRAIN_ROWS" \
    --test_rows "$TEST_ROWS" ${GEN_ARGS:-} >&2
fi
source scripts/lib/cluster.sh
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# Our cluster, ROUND: appends a JSON line to RESULTS.
run_ours() {
  local round=$1 dir
  dir=$OUT/r$round-ours
  mkdir -p "$dir"
  "$PY" bench/ctr_vs_pytorch.py job --data "$DATA" --batch "$BATCH" \
    >"$dir/job.json"
  cluster_start "$BUILD_DIR" "$dir" 2 2 >/dev/null
  cluster_submit_and_wait "$dir/job.json" "$dir" >/dev/null || return 1
  cluster_peak_rss >"$dir/rss.txt"
  cluster_stop >/dev/null 2>&1 || true
  "$PY" bench/ctr_vs_pytorch.py record-ours --status "$dir/status.json" \
    --worker_log "$dir/worker0.log" --rss "$dir/rss.txt" --round "$round" \
    >>"$RESULTS"
}

# A PyTorch system, ddp | single | single-same, ROUND.
run_torch() {
  local system=$1 round=$2 dir batch=$BATCH mode=$1
  local replay=()
  dir=$OUT/r$round-$system
  mkdir -p "$dir"
  [ "$system" != ddp ] && batch=$((2 * BATCH))
  if [ "$system" = single-same ]; then
    mode=single
    "$PY" bench/ctr_vs_pytorch.py job --data "$DATA" --batch "$BATCH" \
      >"$dir/job.json"
    replay=(--replay_job "$dir/job.json"
      --replay_tool "$BUILD_DIR/bench/ps-ctr-replay-state")
  fi
  # shellcheck disable=SC2086  # TORCH_ARGS are meant to split
  "$PY" bench/ctr_torch.py --mode "$mode" --world_size 2 "${replay[@]}" \
    --train "$DATA/train.tsv" --test "$DATA/test.tsv" --epochs 1 \
    --batch_size "$batch" --dim 16 --bottom 64,16 --top 64,32 \
    --interaction dot --sparse_optimizer rowwise_adagrad --sparse_lr 0.05 \
    --dense_optimizer adagrad --dense_lr 0.01 ${TORCH_ARGS:-} \
    >"$dir/out.txt" 2>"$dir/log.txt" ||
    { tail -n 20 "$dir/log.txt" >&2; return 1; }
  tail -n 1 "$dir/out.txt" | "$PY" bench/ctr_vs_pytorch.py record-torch \
    --round "$round" >>"$RESULTS"
}

for round in $(seq 1 "$ROUNDS"); do
  for system in $SYSTEMS; do
    echo "ctr_vs_pytorch: round $round/$ROUNDS: $system" >&2
    if [ "$system" = ours ]; then run_ours "$round"; else run_torch "$system" "$round"; fi
    tail -n 1 "$RESULTS" >&2
  done
done
echo "CTR (DLRM-style, 26 tables of dim 16), $(wc -l <"$DATA/train.tsv") training rows, 1 epoch, medians of $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" bench/ctr_vs_pytorch.py table "$RESULTS" --teacher "$DATA/teacher.json" |
  tee "$OUT/table.md"
echo "results and logs: $OUT" >&2

#!/usr/bin/env bash
# The PyTorch DLRM example through the cluster against PyTorch alone
# (docs/benchmarks.md, "The PyTorch DLRM example against DDP"): generated
# Criteo-format data (bench/criteo_gen.py: a hidden logistic teacher, so
# the best achievable AUC is known), the model of bench/ctr_torch.py's
# CtrModel (one table of dim 16 over the 26 fields, row-wise Adagrad 0.05;
# bottom MLP 64-16, DOT, top MLP 64-32, dense Adagrad 0.01), EPOCHS epochs,
# trained
#   - ours: examples/pytorch/run_dlrm.sh: 1 coordinator, 2 servers, 2
#     PyTorch workers (paramserver.torch.ShardedEmbedding; BSP, durability
#     DURABILITY, default MEMORY), batch BATCH per worker, through the SDK's
#     compiled transport (paramserver._native; TRANSPORT=native);
#   - ours-py: the same with the SDK's pure-Python transport (the default
#     for sparse jobs; TRANSPORT=python);
#   - ddp: bench/ctr_torch.py --mode ddp: PyTorch DDP, gloo, 2 processes of
#     batch BATCH, one fused nn.EmbeddingBag(sparse=True) holding the full
#     tables in each rank;
#   - single: bench/ctr_torch.py --mode single: one process of batch
#     2 * BATCH (the same module and optimizers);
# in one sitting, ROUNDS rounds, each running every system of SYSTEMS
# (default "ours ours-py ddp single") once in that order, round r with seed r (initial values, data order) for all three. Every process has one intra-op thread (single: 2). Prints a
# Markdown table of medians: training time (the training loops only: no
# data loading, no evaluation; ours from worker 0's JSON line), test AUC
# and log loss, ratios to DDP, and the teacher's best.
#
#   ROUNDS=3 TRAIN_ROWS=2000000 TEST_ROWS=200000 bench/dlrm_vs_ddp.sh [OUT_DIR]
#   ROUNDS=1 TRAIN_ROWS=100000 TEST_ROWS=20000 bench/dlrm_vs_ddp.sh  # smoke
#
# GEN_ARGS adds bench/criteo_gen.py options; DATA (a directory holding
# train.tsv, test.tsv and teacher.json) reuses generated data. Uses the
# executables and the Python package in BUILD_DIR (build them first).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-dlrm-vs-ddp.XXXXXX)}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-1024}
EPOCHS=${EPOCHS:-1}
TRAIN_ROWS=${TRAIN_ROWS:-2000000}
TEST_ROWS=${TEST_ROWS:-200000}
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
DURABILITY=${DURABILITY:-MEMORY}
SYSTEMS=${SYSTEMS:-ours ours-py ddp single}
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
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
TORCH_ARGS=(--train "$DATA/train.tsv" --test "$DATA/test.tsv" --epochs "$EPOCHS"
  --dim 16 --bottom 64,16 --top 64,32 --interaction dot
  --sparse_optimizer rowwise_adagrad --sparse_lr 0.05
  --dense_optimizer adagrad --dense_lr 0.01)

run_ours() {
  local round=$1 system=$2 transport=native
  [ "$system" = ours-py ] && transport=python
  local dir=$OUT/r$round-$system
  rm -rf "$dir"
  PS_SKIP_BUILD=1 BUILD_DIR=$BUILD_DIR DATA=$DATA RUN_DIR=$dir SEED=$round \
    TRANSPORT=$transport \
    examples/pytorch/run_dlrm.sh --epochs "$EPOCHS" --batch_size "$BATCH" \
    --durability "$DURABILITY" >"$OUT/r$round-$system.out" 2>&1 ||
    { tail -n 20 "$OUT/r$round-$system.out" >&2; return 1; }
  "$PY" bench/dlrm_vs_ddp.py ours --round "$round" --run_dir "$dir" \
    --system "$system" >>"$RESULTS"
}

run_torch() {
  local round=$1 mode=$2 out=$OUT/r$1-$2.out
  local -a args=(--mode "$mode")
  if [ "$mode" = ddp ]; then
    args+=(--world_size 2 --batch_size "$BATCH" --threads 1)
  else
    args+=(--batch_size $((2 * BATCH)) --threads 2)
  fi
  "$PY" bench/ctr_torch.py "${args[@]}" "${TORCH_ARGS[@]}" --seed "$round" \
    --work_dir "$OUT" \
    >"$out" 2>"$OUT/r$round-$mode.log" ||
    { tail -n 20 "$OUT/r$round-$mode.log" >&2; return 1; }
  "$PY" bench/dlrm_vs_ddp.py torch --round "$round" --system "$mode" \
    --result "$out" >>"$RESULTS"
}

for round in $(seq 1 "$ROUNDS"); do
  for system in $SYSTEMS; do
    echo "round $round: $system" >&2
    case $system in
      ours | ours-py) run_ours "$round" "$system" ;;
      *) run_torch "$round" "$system" ;;
    esac
    tail -n 1 "$RESULTS" >&2
  done
done
"$PY" bench/dlrm_vs_ddp.py table --results "$RESULTS" --teacher "$DATA/teacher.json"

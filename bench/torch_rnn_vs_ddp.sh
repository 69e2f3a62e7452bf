#!/usr/bin/env bash
# A user's own recurrent PyTorch model through the cluster against PyTorch
# alone (docs/benchmarks.md, "A PyTorch LSTM against DDP"): the LSTM of
# bench/torch_rnn_vs_ddp.py (Fashion-MNIST images read row by row, 24,714
# parameters, Adam LR), EPOCHS epochs, trained
#   - ours: 1 coordinator, 2 servers (the build tree's), 2 PyTorch workers
#     (paramserver.torch.Worker from BUILD_DIR/python), BSP, durability
#     MEMORY, batch BATCH per worker;
#   - before (if BASELINE_PYTHONPATH is set): the same with the paramserver
#     package found there (an older SDK), for a before/after in one sitting;
#   - ddp: PyTorch DDP, gloo, 2 processes of batch BATCH;
#   - single: one process of batch 2 * BATCH;
# in one sitting, ROUNDS rounds, each running every system once (the order
# rotating from round to round). Every process has one intra-op thread
# (OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, torch.set_num_threads(1)).
# Every system trains on the same batches from the same initial values
# (seed 1). Prints a Markdown table of medians: training time (the training
# loops only), its ratio to DDP's, test accuracy, and worker / rank 0's mean
# per-step time in forward + backward (compute), step() and getting the
# next batch (wait).
#
#   ROUNDS=3 bench/torch_rnn_vs_ddp.sh [OUT_DIR]
#   ROUNDS=1 EPOCHS=1 MAX_SAMPLES=12800 bench/torch_rnn_vs_ddp.sh  # smoke
#
# SYSTEMS (default "ours ddp single", plus "before" with
# BASELINE_PYTHONPATH) picks systems ("ours-py": ours with
# Worker(native=False), the pure-Python step pipeline, where ours runs the
# compiled transport when it is built); PROFILE=1 also writes worker 0's
# cProfile of its training loops to OUT_DIR/r<round>-ours.prof. Uses the
# executables and the Python package in BUILD_DIR (build ps-coordinator,
# ps-server and paramserver_python first). Every run's JSON line is in
# OUT_DIR/results.jsonl, logs in OUT_DIR/r<round>-<system>*.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-rnn-vs-ddp.XXXXXX)}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-2}
BATCH=${BATCH:-64}
LR=${LR:-0.002}
MAX_SAMPLES=${MAX_SAMPLES:-0}
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
DEFAULT_SYSTEMS="ours ddp single"
[ -n "${BASELINE_PYTHONPATH:-}" ] && DEFAULT_SYSTEMS="ours before ddp single"
read -r -a SYSTEM_LIST <<<"${SYSTEMS:-$DEFAULT_SYSTEMS}"
PY=/usr/bin/python3
BENCH=bench/torch_rnn_vs_ddp.py
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source scripts/lib/cluster.sh
CLUSTER_BUILD_DIR=$BUILD_DIR
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
COMMON=(--epochs "$EPOCHS" --batch_size "$BATCH" --lr "$LR" --max_samples "$MAX_SAMPLES")

# Our cluster: ROUND LABEL PYTHONPATH [WORKER ARGS...]; appends worker 0's
# JSON line.
run_ours() {
  local round=$1 label=$2 pythonpath=$3 dir=$OUT/r$1-$2 job i
  local -a extra=("${@:4}")
  local -a pids=() profile=()
  rm -rf "$dir"
  cluster_start "$BUILD_DIR" "$dir" 2 0 >/dev/null
  [ "${PROFILE:-0}" = 1 ] && profile=(--profile "$OUT/r$round-$label.prof")
  job=$(PYTHONPATH=$pythonpath "$PY" "$BENCH" submit --coordinator="$COORDINATOR" \
    --seed "$round" "${COMMON[@]}")
  for i in 0 1; do
    PYTHONPATH=$pythonpath "$PY" "$BENCH" worker --coordinator="$COORDINATOR" \
      --seed "$round" "${COMMON[@]}" "${profile[@]}" "${extra[@]}" >"$dir/pyworker$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || { tail -n 20 "$dir/pyworker$i.log" >&2; cluster_stop || true; return 1; }
  done
  cluster_stop >/dev/null 2>&1 || true
  grep -h '^{' "$dir"/pyworker*.log | tail -n 1 |
    "$PY" -c "import json,sys; r=json.loads(sys.stdin.read()); r['system']='$label'; r['round']=$round; r['job']='$job'; print(json.dumps(r))" \
    >>"$RESULTS"
}

# PyTorch alone: ROUND MODE; appends the JSON line.
run_torch() {
  local round=$1 mode=$2 out=$OUT/r$1-$2
  PYTHONPATH=$BUILD_DIR/python "$PY" "$BENCH" "$mode" --seed "$round" "${COMMON[@]}" \
    >"$out.out" 2>"$out.log" || { tail -n 20 "$out.log" >&2; return 1; }
  grep -h '^{' "$out.out" | tail -n 1 |
    "$PY" -c "import json,sys; r=json.loads(sys.stdin.read()); r['round']=$round; print(json.dumps(r))" \
    >>"$RESULTS"
}

n=${#SYSTEM_LIST[@]}
for round in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    system=${SYSTEM_LIST[$(((k + round - 1) % n))]}
    echo "round $round: $system" >&2
    case $system in
      ours) run_ours "$round" ours "$BUILD_DIR/python" ;;
      before) run_ours "$round" before "$BASELINE_PYTHONPATH" ;;
      ours-py) run_ours "$round" ours-py "$BUILD_DIR/python" --native 0 ;;
      *) run_torch "$round" "$system" ;;
    esac
    tail -n 1 "$RESULTS" >&2
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT" >&2
"$PY" "$BENCH" table --results "$RESULTS"

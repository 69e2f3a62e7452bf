#!/usr/bin/env bash
# Ours against PyTorch on the README job (docs/benchmarks.md, "Against
# PyTorch"): deploy/jobs/fashion-mnist-mlp.json (MLP 784-256-128-10, Adam
# 1e-3, batch 64 per worker, 2 workers, BSP, 15 epochs) trained
#   - by our cluster: 1 coordinator, 2 servers, 2 CPU workers, as shipped
#     (durability WAL; DURABILITY="WAL MEMORY" also runs MEMORY);
#   - by PyTorch DDP (gloo, 2 processes, batch 64 each);
#   - by a PyTorch RPC parameter server (1 server, 2 trainers, BSP);
#   - by one PyTorch process with batch 128;
# in one sitting: ROUNDS rounds, each running every system once (the order
# rotating from round to round). Prints a Markdown table of medians over the
# rounds: training time, time to TARGET test accuracy (ours from the job's
# per-epoch records, JobProgress.epochs; PyTorch evaluates after each epoch),
# final accuracy, and both times as ratios to DDP's.
#
#   ROUNDS=3 EPOCHS=15 BUILD_DIR=build DURABILITY=WAL bench/vs_pytorch.sh [OUT_DIR]
#   EPOCHS=1 ROUNDS=1 bench/vs_pytorch.sh        # a smoke run (~1 minute)
#
# BASELINE_BUILD_DIR, if set, adds our cluster from that build too (for
# example an older commit's), with each DURABILITY, labelled "baseline", in
# the same rounds: a before/after comparison in one sitting.
# SYSTEMS (default "ours ddp rpc single") picks systems; TARGET (0.88) the
# accuracy; DATA_DIR the Fashion-MNIST .gz files (Debian's
# dataset-fashion-mnist). Uses the executables already in BUILD_DIR
# (ps-coordinator ps-server ps-worker psctl): build them first. Installs
# Debian's python3-torch when /usr/bin/python3 cannot import torch. Every run's
# JSON line is in OUT_DIR/results.jsonl, logs in OUT_DIR/r<round>-<system>/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-vs-pytorch.XXXXXX)}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-15}
BUILD_DIR=${BUILD_DIR:-build}
DURABILITY=${DURABILITY:-WAL}
SYSTEMS=${SYSTEMS:-ours ddp rpc single}
TARGET=${TARGET:-0.88}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3  # Debian's, for Debian's torch.
# One thread per process everywhere, as our workers' --compute_threads=1.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# Setup: Debian's PyTorch.
if ! "$PY" -c 'import torch, torch.distributed.rpc' 2>/dev/null; then
  echo "vs_pytorch: installing python3-torch from Debian" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get install -y --no-install-recommends python3-torch >&2 ||
    { $SUDO apt-get update >&2 && $SUDO apt-get install -y --no-install-recommends python3-torch >&2; }
fi
source scripts/lib/cluster.sh
CLUSTER_BUILD_DIR=$BUILD_DIR
for exe in "coordinator ps-coordinator" "server ps-server" "worker ps-worker" "client psctl"; do
  # shellcheck disable=SC2086  # "subdir name"
  bin=$(cluster_binary $exe)
  [ -x "$bin" ] || { echo "vs_pytorch: $bin is missing: build first (scripts/build.sh)" >&2; exit 1; }
done
PSCTL=$(cluster_binary client psctl)
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# Our cluster: DURABILITY ROUND [BUILD LABEL]; appends a JSON line to RESULTS.
run_ours() {
  local durability=$1 round=$2 build=${3:-$BUILD_DIR} label=${4:-ours} dir id
  local psctl
  psctl=$(CLUSTER_BUILD_DIR=$build cluster_binary client psctl)
  dir=$OUT/r$round-$label-$durability
  mkdir -p "$dir"
  sed -e "s|/usr/share/datasets/fashion-mnist|$DATA_DIR|" \
      -e "s/\"epochs\": [0-9]*/\"epochs\": $EPOCHS/" \
      -e "s/\"durability\": \"[A-Z]*\"/\"durability\": \"$durability\"/" \
      deploy/jobs/fashion-mnist-mlp.json >"$dir/job.json"
  CLUSTER_BUILD_DIR=$build
  cluster_start "$build" "$dir" 2 2 >/dev/null
  "$psctl" --coordinator="$COORDINATOR" submit "$dir/job.json" --watch \
    >"$dir/watch.log" 2>&1 || { tail -n 5 "$dir/watch.log" >&2; return 1; }
  id=$(sed -n 's/^submitted //p' "$dir/watch.log")
  "$psctl" --coordinator="$COORDINATOR" get "$id" >"$dir/status.json"
  cluster_cpu_seconds >"$dir/cpu.txt"
  cluster_stop >/dev/null 2>&1 || true
  CLUSTER_BUILD_DIR=$BUILD_DIR
  "$PY" bench/vs_pytorch.py record-ours --status "$dir/status.json" \
    --system "$label ($durability)" --round "$round" --cpu "$dir/cpu.txt" \
    >>"$RESULTS"
}

# A PyTorch system: ddp | rpc | single, ROUND.
run_torch() {
  local system=$1 round=$2 dir
  dir=$OUT/r$round-$system
  mkdir -p "$dir"
  "$PY" bench/vs_pytorch.py run --system "$system" --epochs "$EPOCHS" \
    --round "$round" --data-dir "$DATA_DIR" >"$dir/result.json" 2>"$dir/log.txt" ||
    { tail -n 20 "$dir/log.txt" >&2; return 1; }
  cat "$dir/result.json" >>"$RESULTS"
}

runs=()
for system in $SYSTEMS; do
  if [ "$system" = ours ]; then
    for d in $DURABILITY; do runs+=("ours $d"); done
    if [ -n "${BASELINE_BUILD_DIR:-}" ]; then
      for d in $DURABILITY; do runs+=("baseline $d"); done
    fi
  else
    runs+=("$system")
  fi
done
for round in $(seq 1 "$ROUNDS"); do
  n=${#runs[@]}
  for k in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2206  # "ours WAL" splits into system and durability
    run=(${runs[$(((k + round - 1) % n))]})
    echo "vs_pytorch: round $round/$ROUNDS: ${run[*]}" >&2
    if [ "${run[0]}" = ours ]; then
      run_ours "${run[1]}" "$round"
    elif [ "${run[0]}" = baseline ]; then
      run_ours "${run[1]}" "$round" "$BASELINE_BUILD_DIR" baseline
    else
      run_torch "${run[0]}" "$round"
    fi
    tail -n 1 "$RESULTS" | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.read())
print("  %s: %.1f s, final accuracy %.4f, %.1f CPU s" % (r["system"], r["train_s"], r["final_accuracy"], r["cpu_s"]))' >&2
  done
done
echo "MLP 784-256-128-10, $EPOCHS epochs, medians of $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" bench/vs_pytorch.py table "$RESULTS" --target "$TARGET" | tee "$OUT/table.md"
echo "results and logs: $OUT" >&2

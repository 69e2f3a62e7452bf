#!/usr/bin/env bash
# The pipelined BSP step against the whole-step push across network hosts
# (docs/benchmarks.md, "The pipelined step"). Each process runs in a network
# namespace of its own, as in tests/system/multihost_test.sh: the coordinator,
# 2 parameter servers and 2 workers, joined by a Linux bridge in a further
# namespace; every host's link limited to RATE (1gbit) each way with `tc tbf`
# (on the host's eth0 for what it sends, on the switch port for what it
# receives). The job is the README's (deploy/jobs/fashion-mnist-mlp.json:
# MLP 784-256-128-10, Adam, batch 64 per worker, BSP, 2 servers, WAL) for
# EPOCHS epochs, once with whole-step pushes ("whole") and once with
# consistency.pipeline_parts PARTS ("pipelined"), alternating, their order
# rotating from round to round; ROUNDS rounds. Prints the median training
# time of each and their ratio, and the final accuracies.
#
#   ROUNDS=3 EPOCHS=2 PARTS=4 bench/pipelined_step.sh [OUT_DIR]
#
# Needs root (ip netns, tc) and the executables in BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d -t ps-pipe.XXXXXX)}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-2}
PARTS=${PARTS:-4}
RATE=${RATE:-1gbit}
SYSTEMS=${SYSTEMS:-whole pipelined}
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
PY=/usr/bin/python3
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.txt
: >"$RESULTS"
[ "$(id -u)" -eq 0 ] || { echo "pipelined_step: needs root (ip netns)" >&2; exit 1; }

TAG=pspl$$
SWITCH_NS=${TAG}sw
HOSTS=(coord s0 s1 w0 w1)
declare -A IP=([coord]=10.78.0.1 [s0]=10.78.0.2 [s1]=10.78.0.3 [w0]=10.78.0.10 [w1]=10.78.0.11)
PIDS=()
ns() { echo "${TAG}$1"; }

stop_processes() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
}
cleanup() {
  stop_processes
  local h
  for h in "${HOSTS[@]}"; do ip netns del "$(ns "$h")" 2>/dev/null || true; done
  ip netns del "$SWITCH_NS" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$SWITCH_NS"
ip -n "$SWITCH_NS" link add br0 type bridge
ip -n "$SWITCH_NS" link set br0 up
for h in "${HOSTS[@]}"; do
  ip netns add "$(ns "$h")"
  ip -n "$SWITCH_NS" link add "v$h" type veth peer name eth0 netns "$(ns "$h")"
  ip -n "$(ns "$h")" link set lo up
  ip -n "$(ns "$h")" addr add "${IP[$h]}/24" dev eth0
  ip -n "$(ns "$h")" link set eth0 up
  ip -n "$SWITCH_NS" link set "v$h" up
  ip -n "$SWITCH_NS" link set "v$h" master br0
  if [ "$RATE" != unlimited ]; then
    ip netns exec "$(ns "$h")" tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 50ms
    ip netns exec "$SWITCH_NS" tc qdisc add dev "v$h" root tbf rate "$RATE" burst 256kb latency 50ms
  fi
done

spawn() {  # DIR HOST BINARY ARGS...
  local dir=$1 h=$2 bin=$3
  shift 3
  ip netns exec "$(ns "$h")" "$bin" --port_file="$dir/$h.ports" "$@" >>"$dir/$h.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 300); do
    [ -s "$dir/$h.ports" ] && return 0
    sleep 0.1
  done
  echo "pipelined_step: $h did not start (see $dir/$h.log)" >&2
  return 1
}

run() {  # ROUND SYSTEM
  local round=$1 system=$2 dir parts=0
  dir=$OUT/r$round-$system
  mkdir -p "$dir"
  [ "$system" = pipelined ] && parts=$PARTS
  "$PY" - "$dir/job.json" "$EPOCHS" "$parts" <<'PYEOF'
import json, sys
path, epochs, parts = sys.argv[1:]
job = json.load(open("deploy/jobs/fashion-mnist-mlp.json"))
job["epochs"] = int(epochs)
if int(parts) > 1:
    job["consistency"]["pipeline_parts"] = int(parts)
json.dump(job, open(path, "w"), indent=1)
PYEOF
  local coordinator=${IP[coord]}:7000
  spawn "$dir" coord "$BUILD_DIR/coordinator/ps-coordinator" --listen="$coordinator" \
    --data_dir="$dir/coord.data" --metrics_port=-1
  for h in s0 s1; do
    spawn "$dir" "$h" "$BUILD_DIR/server/ps-server" --coordinator="$coordinator" \
      --listen=0.0.0.0:7100 --advertise_host="${IP[$h]}" --data_dir="$dir/$h.data" \
      --metrics_port=-1
  done
  for w in w0 w1; do
    spawn "$dir" "$w" "$BUILD_DIR/worker/ps-worker" --coordinator="$coordinator" \
      --device=cpu --compute_threads=1 --metrics_port=-1
  done
  local psctl=(ip netns exec "$(ns coord)" "$BUILD_DIR/client/psctl" "--coordinator=$coordinator")
  "${psctl[@]}" submit "$dir/job.json" --watch >"$dir/watch.log" 2>&1 ||
    { tail -n 5 "$dir/watch.log" >&2; stop_processes; return 1; }
  local id
  id=$(sed -n 's/^submitted //p' "$dir/watch.log")
  "${psctl[@]}" get "$id" >"$dir/status.json"
  : >"$dir/cpu.txt"
  local p
  for p in "${PIDS[@]}"; do
    awk -v t="$(getconf CLK_TCK)" -v p="pid$p" '{ print p, ($14 + $15) / t }' \
      "/proc/$p/stat" >>"$dir/cpu.txt" 2>/dev/null || true
  done
  stop_processes
  rm -rf "$dir"/*.data  # The servers' and coordinator's stores: not needed.
  "$PY" bench/vs_pytorch.py record-ours --status "$dir/status.json" --system "$system" \
    --round "$round" --cpu "$dir/cpu.txt" >>"$RESULTS"
  tail -n 1 "$RESULTS" >&2
}

runs=($SYSTEMS)
for round in $(seq 1 "$ROUNDS"); do
  k=${#runs[@]}
  for i in $(seq 0 $((k - 1))); do
    system=${runs[$(((i + round - 1) % k))]}
    echo "pipelined_step: round $round/$ROUNDS: $system" >&2
    run "$round" "$system"
  done
done
echo "README MLP, $EPOCHS epochs, 2 workers, 2 servers, links $RATE, parts $PARTS;" \
  "medians of $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$RESULTS" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = {}
for system in dict.fromkeys(r["system"] for r in rows):
    ts = [r["train_s"] for r in rows if r["system"] == system and r["train_s"]]
    accs = [r["final_accuracy"] for r in rows if r["system"] == system and r["final_accuracy"]]
    med[system] = statistics.median(ts) if ts else float("nan")
    print(f"| {system} | {med[system]:.1f} s | runs {', '.join(f'{t:.1f}' for t in ts)} |"
          f" accuracy {', '.join(f'{a:.4f}' for a in accs)} |")
if "whole" in med and "pipelined" in med:
    print(f"pipelined / whole = {med['pipelined'] / med['whole']:.2f}")
PYEOF
echo "results and logs: $OUT" >&2

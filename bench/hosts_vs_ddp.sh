#!/usr/bin/env bash
# Ours against PyTorch DDP across network hosts (docs/benchmarks.md, "Across
# hosts"). Each process runs in a Linux network namespace of its own, as in
# tests/system/multihost_test.sh: the coordinator, 2 parameter servers and N
# workers (hosts coord, s0, s1, w0..w{N-1}); DDP's N gloo ranks run on the
# worker hosts w0..w{N-1}. The hosts are joined by a switch in a further
# namespace. Link shapes (SHAPES):
#   unlimited  a Linux bridge, no limit (veth pairs: memory speed);
#   1gbit      the same, every host's link limited to 1 Gbit/s each way with
#              `tc tbf` (on the host's eth0 for what it sends, on the switch's
#              port for what it receives);
#   2ms        bench/delay_bridge.c instead of the Linux bridge: a user-space
#              switch that holds every frame DELAY_US (2000) microseconds, so
#              2 ms each way on every path (this kernel has no netem). No rate
#              limit. Its forwarding costs CPU that the Linux bridge does not;
#   0ms        delay_bridge with no delay: that cost alone, for comparison.
#   1gbit+2ms  the delay bridge and the tbf limits together.
#   NNNmbit    (e.g. 200mbit) the Linux bridge with every link limited to that
#              rate, as 1gbit is.
# The job is the README's (deploy/jobs/fashion-mnist-mlp.json: MLP
# 784-256-128-10, Adam 1e-3, batch 64 per worker, BSP, 2 servers, durability
# WAL) for EPOCHS epochs with N workers (WORKERS, default "2 4"); DDP trains
# the same model on the same split (bench/hosts_ddp.py, from vs_pytorch.py).
# SYSTEMS (default "ours ddp"; also "ours-bf16", "ours-fp16": ours with
# mixed_precision.wire_parameters BF16 / FP16; "ours-pipelined": ours with
# consistency.pipeline_parts PARTS, default 4) run alternately, their order
# rotating from round to round; ROUNDS (3) rounds. Prints a Markdown table of
# medians: training time, final test accuracy, the ratio to DDP's time, and the
# bytes worker host w0 sent and received per step (its eth0 counters) against
# the step's payload (the parameters' float32 bytes pushed and pulled).
#
#   ROUNDS=3 EPOCHS=1 bench/hosts_vs_ddp.sh [OUT_DIR]   # about 20 min under load 10-20
#   SHAPES=1gbit WORKERS=2 SYSTEMS="ours ours-bf16 ddp" bench/hosts_vs_ddp.sh
#   SHAPES=200mbit WORKERS=2 SYSTEMS="ours ours-pipelined" bench/hosts_vs_ddp.sh
#
# Needs root (ip netns, tc), gcc (the delay bridge), Debian's python3-torch and
# the executables in BUILD_DIR (default build). Every run's JSON line is in
# OUT_DIR/results.jsonl; the namespaces are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$(mktemp -d -t ps-hosts.XXXXXX)}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-1}
WORKERS=${WORKERS:-2 4}
SHAPES=${SHAPES:-unlimited 1gbit 2ms}
SYSTEMS=${SYSTEMS:-ours ddp}
DELAY_US=${DELAY_US:-2000}
PARTS=${PARTS:-4}
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

[ "$(id -u)" -eq 0 ] || { echo "hosts_vs_ddp: needs root (ip netns)" >&2; exit 1; }
for exe in coordinator/ps-coordinator server/ps-server worker/ps-worker client/psctl; do
  [ -x "$BUILD_DIR/$exe" ] || { echo "hosts_vs_ddp: $BUILD_DIR/$exe is missing: build first" >&2; exit 1; }
done
"$PY" -c 'import torch.distributed' 2>/dev/null ||
  { echo "hosts_vs_ddp: needs Debian's python3-torch" >&2; exit 1; }
gcc -O2 -Wall -o "$OUT/delay_bridge" bench/delay_bridge.c

TAG=pshv$$
SWITCH_NS=${TAG}sw
MAX_WORKERS=0
for n in $WORKERS; do [ "$n" -gt "$MAX_WORKERS" ] && MAX_WORKERS=$n; done
HOSTS=(coord s0 s1)
for w in $(seq 0 $((MAX_WORKERS - 1))); do HOSTS+=("w$w"); done
declare -A IP=([coord]=10.79.0.1 [s0]=10.79.0.2 [s1]=10.79.0.3)
for w in $(seq 0 $((MAX_WORKERS - 1))); do IP[w$w]=10.79.0.$((10 + w)); done
PIDS=()
SPAWN_WRAP=(env)  # A command that spawn() runs its binary under.
BRIDGE_PID=""

ns() { echo "${TAG}$1"; }

# SIGTERM to the processes this script started (and to the one a wrapper
# such as strace runs), SIGKILL to those left after 10 s.
stop_processes() {
  local p i
  for p in "${PIDS[@]}"; do
    pkill -TERM -P "$p" 2>/dev/null || true
    kill -TERM "$p" 2>/dev/null || true
  done
  for i in $(seq 1 100); do
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && break; p=""; done
    [ -z "${p:-}" ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  PIDS=()
}
teardown() {
  local h
  if [ -n "$BRIDGE_PID" ]; then
    kill "$BRIDGE_PID" 2>/dev/null
    wait "$BRIDGE_PID" 2>/dev/null || true
    cat "$OUT/delay_bridge.log" >&2  # Frames it dropped, if any.
  fi
  BRIDGE_PID=""
  for h in "${HOSTS[@]}"; do ip netns del "$(ns "$h")" 2>/dev/null || true; done
  ip netns del "$SWITCH_NS" 2>/dev/null || true
}
cleanup() {
  stop_processes
  teardown
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The hosts and their links, shaped as SHAPE.
setup() {
  local shape=$1 h ports=()
  ip netns add "$SWITCH_NS"
  for h in "${HOSTS[@]}"; do
    ip netns add "$(ns "$h")"
    ip -n "$SWITCH_NS" link add "v$h" type veth peer name eth0 netns "$(ns "$h")"
    ip -n "$(ns "$h")" link set lo up
    ip -n "$(ns "$h")" addr add "${IP[$h]}/24" dev eth0
    ip -n "$(ns "$h")" link set eth0 up
    ip -n "$SWITCH_NS" link set "v$h" up
    ports+=("v$h")
    if [[ $shape == *bit* ]]; then
      # What the host sends, and what it receives (the switch port's egress).
      local rate=${shape%%+*}
      ip netns exec "$(ns "$h")" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
      ip netns exec "$SWITCH_NS" tc qdisc add dev "v$h" root tbf rate "$rate" burst 256kb latency 50ms
    fi
  done
  case $shape in
    unlimited | *bit)
      ip -n "$SWITCH_NS" link add br0 type bridge
      ip -n "$SWITCH_NS" link set br0 up
      for h in "${HOSTS[@]}"; do ip -n "$SWITCH_NS" link set "v$h" master br0; done
      ;;
    *ms)
      local delay=$DELAY_US
      [[ $shape == *0ms ]] && [[ $shape != *[1-9]0ms ]] && delay=0
      ip netns exec "$SWITCH_NS" "$OUT/delay_bridge" "$delay" "${ports[@]}" \
        >"$OUT/delay_bridge.log" 2>&1 &
      BRIDGE_PID=$!
      sleep 0.3
      kill -0 "$BRIDGE_PID" || { cat "$OUT/delay_bridge.log" >&2; exit 1; }
      ;;
    *) echo "hosts_vs_ddp: unknown shape $shape" >&2; exit 1 ;;
  esac
}

# Bytes and packets host H has sent and received: "tx_bytes rx_bytes tx_packets rx_packets".
counters() {
  ip netns exec "$(ns "$1")" sh -c 'cd /sys/class/net/eth0/statistics &&
    echo $(cat tx_bytes) $(cat rx_bytes) $(cat tx_packets) $(cat rx_packets)'
}
# CPU seconds (user + system) of PID so far.
cpu_of() {
  awk -v t="$(getconf CLK_TCK)" '{ print ($14 + $15) / t }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# Starts BINARY on HOST, waits until it serves (its port file).
spawn() {  # DIR HOST BINARY ARGS...
  local dir=$1 h=$2 bin=$3 i
  shift 3
  ip netns exec "$(ns "$h")" "${SPAWN_WRAP[@]}" "$bin" --port_file="$dir/$h.ports" "$@" \
    >>"$dir/$h.log" 2>&1 &
  PIDS+=($!)
  for i in $(seq 1 300); do
    [ -s "$dir/$h.ports" ] && return 0
    sleep 0.1
  done
  echo "hosts_vs_ddp: $h did not start (see $dir/$h.log)" >&2
  return 1
}

# Our cluster: SHAPE WORKERS ROUND SYSTEM (ours | ours-bf16 | ours-fp16 |
# ours-pipelined).
run_ours() {
  local shape=$1 n=$2 round=$3 system=$4 dir wire="" parts=0 id before after w cpu
  dir=$OUT/$shape-w$n-r$round-$system
  mkdir -p "$dir"
  case $system in
    ours-bf16) wire=BF16 ;; ours-fp16) wire=FP16 ;; ours-pipelined) parts=$PARTS ;;
  esac
  "$PY" - "$dir/job.json" "$EPOCHS" "$n" "$DATA_DIR" "$wire" "$parts" <<'EOF'
import json, sys
path, epochs, workers, data, wire, parts = sys.argv[1:]
with open("deploy/jobs/fashion-mnist-mlp.json") as f:
    job = json.load(f)
job["epochs"] = int(epochs)
job["num_workers"] = int(workers)
for k, v in job["dataset"].items():
    if isinstance(v, str):
        job["dataset"][k] = v.replace("/usr/share/datasets/fashion-mnist", data)
if wire:
    job["mixed_precision"] = {"wire_parameters": wire}
if int(parts) > 1:
    job["consistency"]["pipeline_parts"] = int(parts)
json.dump(job, open(path, "w"), indent=1)
EOF
  local coordinator=${IP[coord]}:7000
  spawn "$dir" coord "$BUILD_DIR/coordinator/ps-coordinator" --listen="$coordinator" \
    --data_dir="$dir/coord.data" --metrics_port=-1
  for h in s0 s1; do
    spawn "$dir" "$h" "$BUILD_DIR/server/ps-server" --coordinator="$coordinator" \
      --listen=0.0.0.0:7100 --advertise_host="${IP[$h]}" --data_dir="$dir/$h.data" \
      --metrics_port=-1
  done
  for w in $(seq 0 $((n - 1))); do
    # STRACE=1: worker 0's system calls, counted (strace -c -f).
    [ "${STRACE:-0}" = 1 ] && [ "$w" = 0 ] && SPAWN_WRAP=(strace -c -f -o "$dir/w0.strace")
    spawn "$dir" "w$w" "$BUILD_DIR/worker/ps-worker" --coordinator="$coordinator" \
      --device=cpu --compute_threads=1 --metrics_port=-1
    SPAWN_WRAP=(env)
  done
  before=$(counters w0)
  local psctl=("ip" "netns" "exec" "$(ns coord)" "$BUILD_DIR/client/psctl" "--coordinator=$coordinator")
  "${psctl[@]}" submit "$dir/job.json" --watch >"$dir/watch.log" 2>&1 ||
    { tail -n 5 "$dir/watch.log" >&2; stop_processes; return 1; }
  after=$(counters w0)
  # Per connection of worker 0: bytes sent and received (ss -ti).
  ip netns exec "$(ns w0)" ss -tin >"$dir/w0.ss" 2>&1 || true
  id=$(sed -n 's/^submitted //p' "$dir/watch.log")
  "${psctl[@]}" get "$id" >"$dir/status.json"
  cpu=0
  : >"$dir/cpu.txt"
  for p in "${PIDS[@]}"; do echo "pid$p $(cpu_of "$p")" >>"$dir/cpu.txt"; done
  stop_processes
  "$PY" bench/vs_pytorch.py record-ours --status "$dir/status.json" --system "$system" \
    --round "$round" --cpu "$dir/cpu.txt" >"$dir/result.json"
  annotate "$dir/result.json" "$shape" "$n" "$before" "$after"
}

# PyTorch DDP: SHAPE WORKERS ROUND.
run_ddp() {
  local shape=$1 n=$2 round=$3 dir t0 r pids=() before after
  dir=$OUT/$shape-w$n-r$round-ddp
  mkdir -p "$dir"
  before=$(counters w0)
  t0=$("$PY" -c 'import time; print(time.time())')
  for r in $(seq 0 $((n - 1))); do
    GLOO_SOCKET_IFNAME=eth0 ip netns exec "$(ns "w$r")" "$PY" bench/hosts_ddp.py \
      --rank "$r" --world "$n" --master "${IP[w0]}:29500" --t0 "$t0" --epochs "$EPOCHS" \
      --round "$round" --system ddp --data-dir "$DATA_DIR" >"$dir/rank$r.json" 2>"$dir/rank$r.log" &
    pids+=($!)
  done
  # Per connection of rank 0 near the end (ss -ti), then its end.
  while kill -0 "${pids[0]}" 2>/dev/null; do
    ip netns exec "$(ns w0)" ss -tin >"$dir/w0.ss.tmp" 2>&1 &&
      grep -q ESTAB "$dir/w0.ss.tmp" && mv "$dir/w0.ss.tmp" "$dir/w0.ss"
    sleep 1
  done
  for r in "${pids[@]}"; do
    wait "$r" || { tail -n 20 "$dir"/rank*.log >&2; return 1; }
  done
  after=$(counters w0)
  "$PY" - "$dir" "$n" >"$dir/result.json" <<'EOF'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
lines = [json.loads(l) for r in range(n) for l in open(f"{d}/rank{r}.json") if l.strip()]
result = next(l for l in lines if "system" in l)
result["cpu_s"] = sum(l["cpu_s"] for l in lines if "system" not in l)
print(json.dumps(result))
EOF
  annotate "$dir/result.json" "$shape" "$n" "$before" "$after"
}

# Adds the shape, worker count and w0's traffic to a result; appends it to RESULTS.
annotate() {  # RESULT SHAPE WORKERS "BEFORE" "AFTER"
  "$PY" - "$@" "$EPOCHS" >>"$RESULTS" <<'EOF'
import json, sys
path, shape, n, before, after, epochs = sys.argv[1:]
r = json.load(open(path))
b, a = [int(x) for x in before.split()], [int(x) for x in after.split()]
n, epochs = int(n), int(epochs)
steps = epochs * ((60000 // n) // 64)
r.update(shape=shape, workers=n, steps=steps,
         w0_tx_bytes=a[0] - b[0], w0_rx_bytes=a[1] - b[1],
         w0_tx_packets=a[2] - b[2], w0_rx_packets=a[3] - b[3])
print(json.dumps(r))
EOF
  tail -n 1 "$RESULTS" | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.read())
print("  %s: %.1f s, accuracy %.4f, w0 sent %.2f MB/step" % (r["system"], r["train_s"],
      r["final_accuracy"], r["w0_tx_bytes"] / r["steps"] / 1e6))' >&2
}

for shape in $SHAPES; do
  setup "$shape"
  for n in $WORKERS; do
    runs=($SYSTEMS)
    for round in $(seq 1 "$ROUNDS"); do
      k=${#runs[@]}
      for i in $(seq 0 $((k - 1))); do
        system=${runs[$(((i + round - 1) % k))]}
        echo "hosts_vs_ddp: $shape, $n workers, round $round/$ROUNDS: $system" >&2
        if [ "$system" = ddp ]; then
          run_ddp "$shape" "$n" "$round"
        else
          run_ours "$shape" "$n" "$round" "$system"
        fi
      done
    done
  done
  teardown
done
echo "README MLP, $EPOCHS epochs, medians of $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" bench/hosts_table.py "$RESULTS" | tee "$OUT/table.md"
echo "results and logs: $OUT" >&2

#!/usr/bin/env bash
# The cluster spread over five network hosts: the coordinator, two servers and
# two workers each in a Linux network namespace of their own, joined by a
# bridge inside a sixth namespace that this test creates (a private subnet that
# never leaves it). Partitions are made by taking a host's link down on the
# bridge (this kernel has no netem): packets are dropped silently, as on a cut
# cable.
#
#   A. A job trains across the hosts (the reference accuracy).
#   B. The same job while server 1, then worker 1, is cut off for 15 s each: it
#      succeeds with A's accuracy. Each node has its place again, and training
#      moves on, within 5 s of its link coming back (the times are printed).
#   C. A job whose server 0 is cut off for longer than the recovery grace
#      fails within lease + grace + 5 s with a message naming its address.
#   D. Every process ends within 5 s of SIGTERM, although a server was
#      unreachable when job C failed.
#
# Usage: multihost_test.sh BUILD_DIR. Needs root (ip netns) and the
# Fashion-MNIST files; exits 77 (skipped) with the reason otherwise.
set -uo pipefail

BUILD_DIR=$(cd "${1:?usage: multihost_test.sh BUILD_DIR}" && pwd)
DATA=${PS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
LEASE_MS=5000
GRACE_MS=20000
CUT_S=15
PY=/usr/bin/python3

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || skip "Fashion-MNIST not found in $DATA"

TAG=psmh$$
BRIDGE_NS=${TAG}br
HOSTS=(coord s0 s1 w0 w1)
declare -A IP=([coord]=10.77.0.1 [s0]=10.77.0.2 [s1]=10.77.0.3 [w0]=10.77.0.4 [w1]=10.77.0.5)
declare -A PID=()
RUN_DIR=$(mktemp -d /tmp/ps-multihost-XXXXXX)
COORDINATOR=${IP[coord]}:7000

ns() { echo "${TAG}$1"; }

cleanup() {
  local h
  for h in "${!PID[@]}"; do kill -KILL "${PID[$h]}" 2>/dev/null; done
  wait 2>/dev/null
  for h in "${HOSTS[@]}"; do ip netns del "$(ns "$h")" 2>/dev/null; done
  ip netns del "$BRIDGE_NS" 2>/dev/null
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $1"
  local log
  for log in "$RUN_DIR"/*.log; do
    echo "---- $(basename "$log") (last 30 lines)"
    tail -n 30 "$log"
  done
  exit 1
}
ok() { echo "ok: $1"; }

# --- The hosts -------------------------------------------------------------
ip netns add "$BRIDGE_NS" 2>/dev/null ||
  skip "cannot create a network namespace (ip netns add)"
ip -n "$BRIDGE_NS" link add br0 type bridge &&
  ip -n "$BRIDGE_NS" link set br0 up || skip "cannot create a bridge"
for h in "${HOSTS[@]}"; do
  ip netns add "$(ns "$h")" || fail "ip netns add $(ns "$h")"
  ip -n "$BRIDGE_NS" link add "v$h" type veth peer name eth0 netns "$(ns "$h")" ||
    fail "veth for $h"
  ip -n "$BRIDGE_NS" link set "v$h" master br0 up
  ip -n "$(ns "$h")" link set lo up
  ip -n "$(ns "$h")" addr add "${IP[$h]}/24" dev eth0
  ip -n "$(ns "$h")" link set eth0 up
done
ok "5 hosts on a private bridge (10.77.0.0/24)"

cut() { ip -n "$BRIDGE_NS" link set "v$1" down; }
mend() { ip -n "$BRIDGE_NS" link set "v$1" up; }

# --- The processes ---------------------------------------------------------
# Starts BINARY on HOST and waits until it serves (it writes its port file).
spawn() {  # HOST BINARY ARGS...
  local h=$1 bin=$2 i
  shift 2
  ip netns exec "$(ns "$h")" "$bin" --port_file="$RUN_DIR/$h.ports" "$@" \
    >>"$RUN_DIR/$h.log" 2>&1 &
  PID[$h]=$!
  for i in $(seq 1 300); do
    [ -s "$RUN_DIR/$h.ports" ] && return 0
    kill -0 "${PID[$h]}" 2>/dev/null || fail "$h started"
    sleep 0.1
  done
  fail "$h started serving within 30 s"
}
spawn coord "$BUILD_DIR/coordinator/ps-coordinator" --listen="$COORDINATOR" \
  --data_dir="$RUN_DIR/coord.data" --metrics_port=-1 --lease_ms=$LEASE_MS \
  --heartbeat_interval_ms=500 --recovery_grace_ms=$GRACE_MS
for h in s0 s1; do
  spawn "$h" "$BUILD_DIR/server/ps-server" --coordinator="$COORDINATOR" \
    --listen="0.0.0.0:7100" --advertise_host="${IP[$h]}" \
    --data_dir="$RUN_DIR/$h.data" --metrics_port=-1
done
for h in w0 w1; do
  spawn "$h" "$BUILD_DIR/worker/ps-worker" --coordinator="$COORDINATOR" \
    --device=cpu --compute_threads=1 --metrics_port=-1
done

psctl() {
  ip netns exec "$(ns coord)" "$BUILD_DIR/client/psctl" \
    --coordinator="$COORDINATOR" "$@"
}
# Prints FIELD of job JOB's status: state, message, clock, vacant (count),
# accuracy.
field() {
  psctl get "$1" 2>/dev/null | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
p = j.get("progress", {})
print({"state": j.get("state", ""), "message": j.get("message", ""),
       "clock": int(p.get("clock", 0)), "vacant": len(j.get("vacant", [])),
       "accuracy": p.get("test_accuracy", -1)}[sys.argv[1]])' "$2"
}
now() { date +%s.%N; }
since() { "$PY" -c "print(f'{$(now) - $1:.1f}')"; }
# Waits up to SECONDS for `field JOB FIELD` to satisfy TEST (a Python
# expression over v); returns 1 on timeout.
wait_for() {
  local job=$1 name=$2 test=$3 seconds=$4 start v
  start=$(now)
  while "$PY" -c "import sys; sys.exit(0 if $(now) - $start < $seconds else 1)"; do
    v=$(field "$job" "$name")
    if [ -n "$v" ] && "$PY" -c "v = '''$v'''; import sys; v = float(v) if v.replace('.', '', 1).replace('-', '', 1).isdigit() else v; sys.exit(0 if ($test) else 1)"; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

write_spec() {  # FILE NAME EPOCHS
  cat >"$1" <<EOF
{
  "name": "$2",
  "model": { "kind": "MLP", "input_dim": 784, "num_classes": 10,
             "hidden_layers": [64], "activation": "RELU" },
  "dataset": { "format": "IDX",
    "train_images": "$DATA/train-images-idx3-ubyte.gz",
    "train_labels": "$DATA/train-labels-idx1-ubyte.gz",
    "test_images": "$DATA/t10k-images-idx3-ubyte.gz",
    "test_labels": "$DATA/t10k-labels-idx1-ubyte.gz",
    "max_train_samples": 4000, "max_test_samples": 2000 },
  "epochs": $3, "batch_size": 32, "seed": 11,
  "optimizer": { "adam": { "learning_rate": 0.001 } },
  "consistency": { "model": "BSP" },
  "num_workers": 2, "num_servers": 2, "block_elems": 16384,
  "durability": "WAL"
}
EOF
}
submit() {
  psctl submit "$1" | sed -n 's/^submitted //p'
}

# --- A: the reference job --------------------------------------------------
write_spec "$RUN_DIR/job.json" multihost 30
start=$(now)
A=$(submit "$RUN_DIR/job.json")
[ -n "$A" ] || fail "job A submitted"
wait_for "$A" state 'v in ("SUCCEEDED", "FAILED", "CANCELLED")' 240 ||
  fail "job A ended within 240 s"
[ "$(field "$A" state)" = SUCCEEDED ] || fail "job A succeeded: $(field "$A" message)"
ACC_A=$(field "$A" accuracy)
ok "A: a job across 5 hosts succeeded in $(since "$start") s, test accuracy $ACC_A"

# --- B: a server and a worker cut off for 15 s each ------------------------
# Cuts HOST for CUT_S seconds while job JOB runs, then reports how long after
# the link came back the place was filled again and the clock moved on.
cut_and_mend() {
  local job=$1 host=$2 clock back
  cut "$host"
  sleep "$CUT_S"
  wait_for "$job" vacant 'v >= 1' 1 ||
    fail "B: job $job shows a vacant place while $host is cut off"
  clock=$(field "$job" clock)
  mend "$host"
  back=$(now)
  # Keepalive and a short reconnect backoff bring a node back within about
  # 2 s of its network (docs/operations.md); 5 s leaves room for a loaded CI.
  wait_for "$job" vacant 'v == 0' 5 ||
    fail "B: $host had its place again within 5 s of its link"
  local placed
  placed=$(since "$back")
  wait_for "$job" clock "v > $clock" 5 ||
    fail "B: training moved on within 5 s of $host's link"
  echo "timing: $host cut ${CUT_S} s: place filled again $placed s and training moving $(since "$back") s after its link came back"
}
start=$(now)
B=$(submit "$RUN_DIR/job.json")
[ -n "$B" ] || fail "job B submitted"
wait_for "$B" clock 'v >= 20' 60 || fail "job B started training"
cut_and_mend "$B" s1
cut_and_mend "$B" w1
[ "$(field "$B" state)" = RUNNING ] || fail "B: job still running after both cuts: $(field "$B" message)"
wait_for "$B" state 'v in ("SUCCEEDED", "FAILED", "CANCELLED")' 240 ||
  fail "job B ended within 240 s"
[ "$(field "$B" state)" = SUCCEEDED ] || fail "job B succeeded: $(field "$B" message)"
ACC_B=$(field "$B" accuracy)
"$PY" -c "import sys; sys.exit(0 if abs($ACC_A - $ACC_B) <= 0.005 else 1)" ||
  fail "B: accuracy $ACC_B equals A's $ACC_A (within 0.005)"
ok "B: server 1 and worker 1 cut off for ${CUT_S} s each; succeeded in $(since "$start") s, test accuracy $ACC_B (A: $ACC_A)"

# --- C: a server cut off for longer than the grace -------------------------
write_spec "$RUN_DIR/long.json" multihost-long 400
C=$(submit "$RUN_DIR/long.json")
[ -n "$C" ] || fail "job C submitted"
wait_for "$C" clock 'v >= 5' 60 || fail "job C started training"
cut s0
cut_at=$(now)
limit=$(( (LEASE_MS + GRACE_MS) / 1000 + 5 ))
wait_for "$C" state 'v == "FAILED"' "$limit" ||
  fail "C: job failed within lease + grace + 5 s = $limit s of the cut ($(field "$C" state): $(field "$C" message))"
took=$(since "$cut_at")
message=$(field "$C" message)
case $message in
  *"${IP[s0]}:7100"*) ;;
  *) fail "C: the failure names server 0's address ${IP[s0]}:7100: $message" ;;
esac
ok "C: server 0 cut off; job failed $took s after the cut (limit $limit s): $message"

# --- D: SIGTERM ends every process within 5 s ------------------------------
sleep 2  # The workers learn that C ended (or keep retrying server 0).
for h in w0 w1 s1 coord; do
  kill -TERM "${PID[$h]}"
  start=$(now)
  for _ in $(seq 1 50); do
    kill -0 "${PID[$h]}" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "${PID[$h]}" 2>/dev/null; then
    fail "D: $h ended within 5 s of SIGTERM"
  fi
  wait "${PID[$h]}" 2>/dev/null
  unset "PID[$h]"
  ok "D: $h ended $(since "$start") s after SIGTERM"
done
mend s0
echo "PASSED: multihost"

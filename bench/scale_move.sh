#!/usr/bin/env bash
# The pause of a server move (psctl scale; docs/benchmarks.md, "Server
# moves"), measured from the job's own clocks: the README job's model
# (deploy/jobs/fashion-mnist-mlp.json: MLP 784-256-128-10, Adam, BSP, 2
# workers, WAL) trains on a local cluster of real processes (1 coordinator,
# 3 servers, 2 workers) and is moved 2 -> 3 -> 2 servers MOVES times each
# way. Worker 0 appends each acknowledged clock to its ack log; a poller
# stamps every new line (every 1 ms). A move's pause is the gap between the
# acknowledgements of clocks C-1 and C, C its boundary (the clock the move
# took effect at), against the median gap between consecutive clocks.
#
#   bash bench/scale_move.sh BUILD_DIR [MOVES] [HEARTBEAT_MS]
#
# Prints one line per move and the medians. Needs the Fashion-MNIST files.
# KEEP_RUN_DIR=1 keeps the run's directory (the processes' logs) and prints
# its path.
set -euo pipefail
BUILD_DIR=$(cd "${1:?usage: $0 BUILD_DIR [MOVES] [HEARTBEAT_MS]}" && pwd)
MOVES=${2:-3}
HEARTBEAT_MS=${3:-500}  # the coordinator's default
SOURCE_DIR=$(cd "$(dirname "$0")/.." && pwd)
PSCTL=$BUILD_DIR/client/psctl
export OPENBLAS_NUM_THREADS=1
# shellcheck source=scripts/lib/cluster.sh disable=SC1091
source "$SOURCE_DIR/scripts/lib/cluster.sh"
RUN_DIR=$(mktemp -d -t ps-scale-bench.XXXXXX)
POLLER=
cleanup() {
  [ -n "$POLLER" ] && kill "$POLLER" 2>/dev/null
  cluster_stop >/dev/null 2>&1 || true
  if [ "${KEEP_RUN_DIR:-0}" = 1 ]; then
    rm -rf "$RUN_DIR"/*.data
    echo "run directory kept: $RUN_DIR"
  else
    rm -rf "$RUN_DIR"
  fi
}
trap cleanup EXIT

# The README job, with enough epochs for the moves.
python3 - "$SOURCE_DIR/deploy/jobs/fashion-mnist-mlp.json" "$RUN_DIR/job.json" <<'EOF'
import json, sys
job = json.load(open(sys.argv[1]))
job["epochs"] = 4
json.dump(job, open(sys.argv[2], "w"))
EOF

CLUSTER_COORDINATOR_ARGS="--heartbeat_interval_ms=$HEARTBEAT_MS"
CLUSTER_WORKER_ARGS=([0]="--ack_log=$RUN_DIR/acks.log")
cluster_start "$BUILD_DIR" "$RUN_DIR" 3 2
touch "$RUN_DIR/acks.log"
python3 - "$RUN_DIR/acks.log" "$RUN_DIR/stamps.txt" <<'EOF' &
import sys, time
src, dst = open(sys.argv[1]), open(sys.argv[2], "w")
buf = ""
while True:
    chunk = src.read()
    if chunk:
        now = time.monotonic()
        buf += chunk
        *lines, buf = buf.split("\n")
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[1] == "0":
                dst.write(f"{parts[2]} {now:.6f}\n")
        dst.flush()
    else:
        time.sleep(0.001)
EOF
POLLER=$!

"$PSCTL" --coordinator="$COORDINATOR" submit "$RUN_DIR/job.json" >"$RUN_DIR/submit.out"
JOB=$(sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' "$RUN_DIR/submit.out")
get() { "$PSCTL" --coordinator="$COORDINATOR" get "$JOB" >"$RUN_DIR/get.json"; }
# Worker 0's last acknowledged clock (its ack log; progress reports lag).
clock() {
  local last
  last=$(tail -n 1 "$RUN_DIR/acks.log" 2>/dev/null | awk '{ print $3 }')
  echo "${last:-0}"
}
wait_clock() {
  while [ "$(clock)" -lt "$1" ]; do sleep 0.05; done
}
wait_clock 50
for _ in $(seq 1 "$MOVES"); do
  for n in 3 2; do
    "$PSCTL" --coordinator="$COORDINATOR" scale "$JOB" --servers=$n --watch
    wait_clock $(( $(clock) + 40 ))
  done
done
get
"$PSCTL" --coordinator="$COORDINATOR" cancel "$JOB" >/dev/null
python3 - "$RUN_DIR/get.json" "$RUN_DIR/stamps.txt" "$HEARTBEAT_MS" <<'EOF'
import json, statistics, sys
job = json.load(open(sys.argv[1]))
stamps = {}
for line in open(sys.argv[2]):
    c, t = line.split()
    stamps.setdefault(int(c), float(t))
clocks = sorted(stamps)
gaps = [stamps[b] - stamps[a] for a, b in zip(clocks, clocks[1:]) if b == a + 1]
step = statistics.median(gaps)
pauses = []
for m in job.get("map_moves", []):
    c = int(m.get("clock", 0))
    if c in stamps and c - 1 in stamps:
        gap = stamps[c] - stamps[c - 1]
        pauses.append(gap)
        print(f"move to v{m['version']} ({m['num_servers']} servers, "
              f"{m.get('units_moved', 0)} units) at clock {c}: gap {gap*1000:.0f} ms "
              f"(coordinator: {int(m['committed_time_ms']) - int(m['requested_time_ms'])} ms "
              f"from the call to the commit)")
print(f"heartbeat {sys.argv[3]} ms; median step {step*1000:.1f} ms; "
      f"median pause per move {statistics.median(pauses)*1000:.0f} ms "
      f"(pause minus a step: {(statistics.median(pauses)-step)*1000:.0f} ms) "
      f"over {len(pauses)} moves")
EOF

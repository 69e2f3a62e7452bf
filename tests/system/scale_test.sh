#!/usr/bin/env bash
# System test of server moves (psctl scale; docs/consistency.md, "Server
# moves"; docs/durability.md, "A server move"): real processes on loopback
# (1 coordinator, 3 servers with data directories, 2 workers). A BSP job on
# 2 servers is scaled to 3 and back to 2 at random clocks, with kill -9
# mixed in: the added server right after the first move (it restarts on its
# data directory and must reload the moved units), then one random victim
# (a server of the job, the coordinator or worker 1) at a random moment of
# the second move (which then either completes or is abandoned and is
# asked again). Checks:
#   - every psctl scale that is asked to finish (--watch) ends with the job
#     on the requested servers (psctl get: shard_map, map_moves);
#   - the job SUCCEEDS with every clock run;
#   - nothing acknowledged is lost: a server restarted after a kill reloads
#     worker clocks above the largest clock each worker had acknowledged
#     (ack logs) when it was killed.
#
#   bash tests/system/scale_test.sh BUILD_DIR SOURCE_DIR [SEED]
#
# Exits 77 (skipped) without the data set or python3. Keeps its run
# directory on failure (PS_KEEP_RUN_DIR=1: always). No timing is asserted.
# Not pipefail: scripts/lib/cluster.sh's cluster_index ends its pipe with tail.
set -eu
{
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR [SEED]" >&2
  exit 64
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
SEED=${3:-${SEED:-$$}}
RANDOM=$SEED
SAMPLES=${SAMPLES:-32768}
EPOCHS=${EPOCHS:-2}
# shellcheck source=tests/system/tap_lib.sh disable=SC1091
source "$SOURCE_DIR/tests/system/tap_lib.sh"
system_test_need_fashion_mnist
system_test_begin ps-scale-test

system_test_mlp_job "$RUN_DIR/job.json" name=scale-system samples="$SAMPLES" \
  epochs="$EPOCHS" batch=16 durability=WAL block_elems=8192

CLUSTER_COORDINATOR_ARGS="--heartbeat_interval_ms=50 --lease_ms=2000"
for i in 0 1; do CLUSTER_WORKER_ARGS[$i]="--ack_log=$RUN_DIR/acks.log"; done
cluster_start "$BUILD_DIR" "$RUN_DIR" 3 2 || fail "cluster did not start"
ok "cluster of 1 coordinator, 3 servers, 2 workers started (seed $SEED)"

"$PSCTL" --coordinator="$COORDINATOR" submit "$RUN_DIR/job.json" \
  >"$RUN_DIR/submit.out" 2>&1 || fail "submit" "$RUN_DIR/submit.out"
JOB=$(sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' "$RUN_DIR/submit.out")
[ -n "$JOB" ] || fail "no job id" "$RUN_DIR/submit.out"

wait_clock() {
  local until=$1
  for _ in $(seq 1 1200); do
    [ "$(clock)" -ge "$until" ] 2>/dev/null && return 0
    sleep 0.05
  done
  fail "the job did not reach clock $until"
}
# Largest acknowledged clock per worker, as "c0 c1".
acked() {
  awk -v j="$JOB" '$1 == j { if ($3 > m[$2] || !($2 in m)) m[$2] = $3 }
    END { printf "%d %d\n", (0 in m) ? m[0] : -1, (1 in m) ? m[1] : -1 }' \
    "$RUN_DIR/acks.log" 2>/dev/null || echo "-1 -1"
}
LOST=0
# kill_restart NAME: kill -9, note the acknowledged clocks, restart; for a
# server of the job, check the clocks it reloads cover them.
kill_restart() {
  local victim=$1 a0 a1 before line c0 c1
  read -r a0 a1 <<<"$(acked)"
  before=$(grep -cE "job $JOB: (reloaded|took over)" "$RUN_DIR/$victim.log" || true)
  echo "# kill -9 $victim at clock $(clock) (acknowledged: $a0 $a1)"
  cluster_kill "$victim"
  sleep 0.$((RANDOM % 5))
  cluster_restart "$victim" || fail "restart $victim"
  case $victim in server*) ;; *) return 0 ;; esac
  for _ in $(seq 1 200); do
    line=$(grep -E "job $JOB: (reloaded|took over)" "$RUN_DIR/$victim.log" |
           sed -n "$((before + 1))p")
    [ -n "$line" ] && break
    # A server no longer in the job (moved off) reloads nothing.
    [ "$(field "len(j['shard_map']['servers'])")" -le "${victim#server}" ] && return 0
    sleep 0.05
  done
  [ -n "$line" ] || { echo "# $victim did not reload the job"; return 0; }
  read -r c0 c1 <<<"$(echo "$line" | sed 's/.*worker clocks \[\?\([0-9]*\) \([0-9]*\).*/\1 \2/')"
  echo "# $victim reloaded worker clocks $c0 $c1"
  [ "$c0" -gt "$a0" ] || LOST=$((LOST + a0 + 1 - c0))
  [ "$c1" -gt "$a1" ] || LOST=$((LOST + a1 + 1 - c1))
}
# scale_to N: psctl scale --watch until the job is on N servers (a move
# abandoned by a crash is asked again; while a move asked before is still in
# progress, e.g. waiting for a killed worker's replacement, psctl is refused
# and asks again half a second later, for up to a minute).
scale_to() {
  local n=$1 try
  for try in $(seq 1 120); do
    timeout 120 "$PSCTL" --coordinator="$COORDINATOR" scale "$JOB" \
      --servers="$n" --watch >>"$RUN_DIR/scale.out" 2>&1 || true
    [ "$(field "len(j['shard_map']['servers'])")" = "$n" ] && return 0
    sleep 0.5
  done
  fail "scale to $n servers" "$RUN_DIR/scale.out"
}

TOTAL=$((EPOCHS * SAMPLES / 32))
wait_clock $((5 + RANDOM % 40))
scale_to 3
ok "moved to 3 servers at clock $(field 'j["map_moves"][-1]["clock"]')"
kill_restart server2

wait_clock $(( $(clock) + 5 + RANDOM % 30 ))
timeout 30 "$PSCTL" --coordinator="$COORDINATOR" scale "$JOB" --servers=2 \
  >>"$RUN_DIR/scale.out" 2>&1 || true
sleep 0.0$((RANDOM % 10))
VICTIMS=(server0 server1 server2 coordinator worker1)
kill_restart "${VICTIMS[$((RANDOM % ${#VICTIMS[@]}))]}"
scale_to 2
ok "moved to 2 servers: $(field '", ".join("v%s at clock %s on %s servers" % (m["version"], m.get("clock", 0), m["num_servers"]) for m in j["map_moves"])')"

timeout 300 "$PSCTL" --coordinator="$COORDINATOR" watch "$JOB" >"$RUN_DIR/watch.out" 2>&1 ||
  fail "the job did not succeed" "$RUN_DIR/watch.out"
[ "$(field 'j["state"]')" = SUCCEEDED ] || fail "job state $(field 'j["state"]')"
[ "$(clock)" = "$TOTAL" ] || fail "final clock $(clock), expected $TOTAL"
ok "the job succeeded with all $TOTAL clocks"
[ "$LOST" -eq 0 ] || fail "$LOST acknowledged updates lost"
ok "no acknowledged update lost"
cluster_stop || fail "a process exited non-zero on SIGTERM"
CLUSTER_PIDS=()
echo "1..$CHECKS"
exit 0
}

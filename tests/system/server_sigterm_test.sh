#!/usr/bin/env bash
# System test of a parameter server stopped cleanly mid-job and started
# again, as an operator's restart or a Kubernetes rolling update does it
# (SIGTERM, then the same address and --data_dir; docs/operations.md,
# "Restarting a server"): real processes on loopback (1 coordinator, 2
# servers, 2 workers). A BSP job runs undisturbed; the same job runs again,
# and while server 1 holds a push (worker 1 is paused with SIGSTOP, so
# worker 0's push of the next clock waits there for worker 1's), server 1
# gets SIGTERM and is started again on its data directory; then worker 1 goes
# on. Checks:
#   - server 1 exits 0 on SIGTERM, having answered the push it held with
#     UNAVAILABLE ("stopping"; its log counts the held calls);
#   - no worker saw CANCELLED, and the job SUCCEEDS with every clock run;
#   - the exported model's parameters equal the undisturbed run's, byte for
#     byte (BSP with two workers: the same clocks, the same sums), and so
#     does the test accuracy.
#
#   bash tests/system/server_sigterm_test.sh BUILD_DIR SOURCE_DIR
#
# Exits 77 (skipped) without the data set or python3. Keeps its run
# directory on failure (PS_KEEP_RUN_DIR=1: always). No timing is asserted.
# shellcheck disable=SC2153  # PSCTL is set by tap_lib.sh
set -eu
{
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 64
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
SAMPLES=${SAMPLES:-9600}
EPOCHS=${EPOCHS:-2}
# shellcheck source=tests/system/tap_lib.sh disable=SC1091
source "$SOURCE_DIR/tests/system/tap_lib.sh"
system_test_need_fashion_mnist
system_test_begin ps-sigterm-test

system_test_mlp_job "$RUN_DIR/job.json" name=sigterm-system samples="$SAMPLES" \
  epochs="$EPOCHS" batch=16 durability=WAL block_elems=8192
# A long lease: worker 1 is paused for a few seconds and must keep its place.
CLUSTER_COORDINATOR_ARGS="--heartbeat_interval_ms=100 --lease_ms=60000"
for i in 0 1; do CLUSTER_WORKER_ARGS[i]="--ack_log=$RUN_DIR/acks$i.log"; done
cluster_start "$BUILD_DIR" "$RUN_DIR" 2 2 || fail "cluster did not start"
ok "cluster of 1 coordinator, 2 servers, 2 workers started"

# export_model FILE: the job's trained model (psctl export).
export_model() {
  timeout 60 "$PSCTL" --coordinator="$COORDINATOR" export "$JOB" --output="$1" \
    >"$RUN_DIR/export.out" 2>&1 || fail "psctl export $JOB" "$RUN_DIR/export.out"
}
pid_of() { echo "${CLUSTER_PIDS[$(cluster_index "$1")]}"; }

JOB=$(submit)
timeout 300 "$PSCTL" --coordinator="$COORDINATOR" watch "$JOB" >"$RUN_DIR/watch1.out" 2>&1 ||
  fail "the undisturbed job did not succeed" "$RUN_DIR/watch1.out"
UNDISTURBED=$(accuracy)
TOTAL=$(clock)
export_model "$RUN_DIR/undisturbed.model"
ok "undisturbed run $JOB: $TOTAL clocks, test accuracy $UNDISTURBED"

JOB=$(submit)
for _ in $(seq 1 1200); do
  [ "$(clock)" -ge $((TOTAL / 4)) ] 2>/dev/null && break
  sleep 0.05
done
# Worker 1 paused: worker 0 pushes the next clock, which each server holds
# until worker 1's push of it arrives; wait until worker 0 acknowledges
# nothing more for a second (its push is held).
WORKER1=$(pid_of worker1)
kill -STOP "$WORKER1"
last=
for _ in $(seq 1 60); do
  now=$(tail -n 1 "$RUN_DIR/acks0.log" 2>/dev/null || true)
  [ -n "$now" ] && [ "$now" = "$last" ] && break
  last=$now
  sleep 1
done
echo "# worker 1 paused at clock $(clock); worker 0's last acknowledged push: $last"
rc=0
cluster_terminate server1 || rc=$?
[ "$rc" -eq 0 ] || fail "server1 exited with status $rc on SIGTERM" "$RUN_DIR/server1.log"
HELD=$(sed -n "s/.*job $JOB: .* answered \([0-9]*\) held push.*/\1/p" "$RUN_DIR/server1.log" | tail -n 1)
[ "${HELD:-0}" -ge 1 ] ||
  fail "server1 answered no held push when it stopped" "$RUN_DIR/server1.log"
grep -h "job $JOB: .* answered [0-9]* held push" "$RUN_DIR/server1.log" | sed 's/^/# /'
ok "server1 exited 0 on SIGTERM, answering the $HELD push(es) it held"
cluster_restart server1 || fail "restart server1"
kill -CONT "$WORKER1"
ok "server1 started again on its data directory; worker 1 goes on"

timeout 300 "$PSCTL" --coordinator="$COORDINATOR" watch "$JOB" >"$RUN_DIR/watch2.out" 2>&1 ||
  fail "the job did not succeed after the restart" "$RUN_DIR/watch2.out"
[ "$(field 'j["state"]')" = SUCCEEDED ] || fail "job state $(field 'j["state"]')"
[ "$(clock)" = "$TOTAL" ] || fail "final clock $(clock), expected $TOTAL"
ok "the job succeeded with all $TOTAL clocks"
if grep -h "job $JOB.*CANCELLED" "$RUN_DIR"/worker*.log; then
  fail "a worker saw CANCELLED"
fi
grep -h "server .* answers again after\|not answering" "$RUN_DIR"/worker*.log | sed 's/^/# /' || true
ok "no worker saw CANCELLED"
export_model "$RUN_DIR/disturbed.model"
# The tensors' bytes after each file's header (the header names the job).
python3 - "$RUN_DIR/undisturbed.model" "$RUN_DIR/disturbed.model" <<'PY' ||
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12:12 + length])
    return header, data[12 + length:]
(h0, t0), (h1, t1) = read(sys.argv[1]), read(sys.argv[2])
print(f"# {len(t0)} bytes of parameters each; clocks {h0['clock']} and {h1['clock']}")
sys.exit(0 if t0 == t1 and h0["clock"] == h1["clock"] else 1)
PY
  fail "the parameters differ from the undisturbed run's"
ok "the exported parameters equal the undisturbed run's, byte for byte"
[ "$(accuracy)" = "$UNDISTURBED" ] ||
  fail "test accuracy $(accuracy), undisturbed $UNDISTURBED"
ok "the test accuracy equals the undisturbed run's ($UNDISTURBED)"
cluster_stop || fail "a process exited non-zero on SIGTERM"
CLUSTER_PIDS=()
echo "1..$CHECKS"
exit 0
}

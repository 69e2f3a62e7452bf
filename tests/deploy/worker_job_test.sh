#!/usr/bin/env bash
# deploy/k8s/base/worker-job.sh (the Kubernetes worker Job's entry point) with
# stand-ins for ps-worker and psctl, for the cases the real cluster in
# prometheus_scrape_test.sh does not reach:
#   1. ps-worker exits by itself while waiting: the script exits with its status
#      (the pod restarts the container);
#   2. SIGTERM (pod deletion) while waiting: ps-worker gets SIGTERM, exit 0;
#   3. `psctl watch` fails (status 1) and is started again; the job ends
#      (status 2, FAILED): ps-worker gets SIGTERM, exit 0;
#   4. an earlier SUCCEEDED job of the same name is not followed.
#   bash tests/deploy/worker_job_test.sh SOURCE_DIR
set -euo pipefail
SCRIPT=$(cd "$1" && pwd)/deploy/k8s/base/worker-job.sh
DIR=$(mktemp -d -t ps-worker-job-test.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
mkdir "$DIR/bin"
cat >"$DIR/bin/ps-worker" <<'STUB'
#!/bin/sh
# Stand-in for ps-worker: runs until SIGTERM (then exit 0), or exits 3 after
# $DIE_AFTER seconds.
trap 'echo "stub ps-worker: SIGTERM"; exit 0' TERM
if [ -n "${DIE_AFTER:-}" ]; then sleep "$DIE_AFTER"; exit 3; fi
while :; do sleep 0.05; done
STUB
cat >"$DIR/bin/psctl" <<'STUB'
#!/bin/sh
# Stand-in for psctl: `list` prints $STATE_DIR/list; `watch` waits for
# $STATE_DIR/done and exits with the status written there.
case "$2" in
  list) cat "$STATE_DIR/list" 2>/dev/null ;;
  watch)
    while [ ! -f "$STATE_DIR/done" ]; do sleep 0.05; done
    rc=$(cat "$STATE_DIR/done")
    rm -f "$STATE_DIR/done"
    exit "$rc" ;;
esac
STUB
chmod +x "$DIR/bin/"*
export STATE_DIR=$DIR PATH="$DIR/bin:$PATH" PS_COORDINATOR=coordinator:7000 PS_JOB_NAME=demo PS_POLL_SECONDS=0.1

n=0
status=0
# The previous case's output is removed first: wait_for must not find its lines
# before the new script has started (and installed its SIGTERM trap).
start() { rm -f "$DIR/list" "$DIR/done" "$DIR/out"; sh "$SCRIPT" --listen=0.0.0.0:7200 >"$DIR/out" 2>&1 & PID=$!; }
finish() { RC=0; wait "$PID" || RC=$?; }
expect() {
  n=$((n + 1))
  if eval "$1"; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2 (exit $RC)"
    sed 's/^/#   /' "$DIR/out"
    status=1
  fi
}
# Waits up to 10 s for FILE to contain TEXT.
wait_for() { for _ in $(seq 1 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

DIE_AFTER=0.5 start
finish
expect '[ "$RC" -eq 3 ] && grep -q "exited by itself (status 3)" "$DIR/out"' \
  "ps-worker exits by itself: the script exits with its status (3)"

start
wait_for "$DIR/out" "waiting for"
kill -TERM "$PID"
finish
expect '[ "$RC" -eq 0 ] && grep -q "stub ps-worker: SIGTERM" "$DIR/out"' \
  "SIGTERM while waiting: ps-worker is stopped with SIGTERM, exit 0"

start
echo "job-000001   SUCCEEDED  demo    epoch   1/1   acc 0.8000" >"$DIR/list"
echo "job-000002   RUNNING    other   epoch   0/1" >>"$DIR/list"
sleep 0.5
expect 'kill -0 "$PID" && ! grep -q following "$DIR/out"' \
  "an earlier SUCCEEDED job of the same name and another job are not followed"
echo "job-000003   RUNNING    demo    epoch   0/1" >>"$DIR/list"
wait_for "$DIR/out" "following job-000003"
echo 1 >"$DIR/done"
wait_for "$DIR/out" "watching again"
for _ in $(seq 1 100); do [ "$(grep -c "following job-000003" "$DIR/out")" -ge 2 ] && break; sleep 0.1; done
expect 'kill -0 "$PID" && [ "$(grep -c "following job-000003" "$DIR/out")" -eq 2 ]' \
  "psctl watch fails (status 1): the job is watched again"
echo 2 >"$DIR/done"
finish
expect '[ "$RC" -eq 0 ] && grep -q "job-000003 ended (psctl watch status 2" "$DIR/out" && grep -q "stub ps-worker: SIGTERM" "$DIR/out"' \
  "the job ends (FAILED): ps-worker is stopped with SIGTERM, exit 0"
echo "1..$n"
exit $status

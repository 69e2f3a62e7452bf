#!/bin/sh
# Entry point of the worker Job's pods (deploy/k8s/base/worker.yaml). Runs
# ps-worker with the container's arguments until the training job named
# $PS_JOB_NAME (the "name" of the job spec that the ps-submit Job submits) has
# ended, then stops it with SIGTERM and exits 0, so that the Kubernetes Job
# completes. (ps-worker serves whatever job the coordinator assigns and has no
# flag to exit after one: docs/operations.md.)
#
# If ps-worker exits by itself, this exits non-zero: the pod restarts the
# container (restartPolicy: OnFailure) and the new worker is given the vacant
# place (docs/durability.md). SIGTERM (pod deletion) stops ps-worker cleanly.
#
# Environment: PS_COORDINATOR (host:port), PS_JOB_NAME, PS_POLL_SECONDS (5).
set -u
: "${PS_COORDINATOR:?PS_COORDINATOR is not set}" "${PS_JOB_NAME:?PS_JOB_NAME is not set}"
poll_s=${PS_POLL_SECONDS:-5}

log() { echo "worker-job: $*" >&2; }

ps-worker "$@" &
worker=$!
watcher=

# On SIGTERM or SIGINT: stop ps-worker (it exits 0 on SIGTERM) and exit with
# its status.
# shellcheck disable=SC2317  # called by the trap
stop() {
  [ -z "$watcher" ] || kill -TERM "$watcher" 2>/dev/null
  kill -TERM "$worker" 2>/dev/null
  wait "$worker"
  exit $?
}
trap stop TERM INT

# Sleeps poll_s seconds; a signal interrupts it.
pause() {
  sleep "$poll_s" &
  wait $!
}

# Exits non-zero if ps-worker is no longer running.
check_worker() {
  if ! kill -0 "$worker" 2>/dev/null; then
    wait "$worker"
    rc=$?
    log "ps-worker exited by itself (status $rc)"
    [ -z "$watcher" ] || kill -TERM "$watcher" 2>/dev/null
    [ "$rc" -ne 0 ] || rc=1
    exit "$rc"
  fi
}

# Prints the id of the newest PENDING or RUNNING job named $PS_JOB_NAME
# (`psctl list` prints "ID STATE NAME ..." rows), or nothing.
active_job() {
  psctl --coordinator="$PS_COORDINATOR" list 2>/dev/null |
    awk -v name="$PS_JOB_NAME" \
      '$3 == name && ($2 == "PENDING" || $2 == "RUNNING") { id = $1 } END { print id }'
}

log "waiting for a PENDING or RUNNING job named $PS_JOB_NAME at $PS_COORDINATOR"
job=
while [ -z "$job" ]; do
  check_worker
  job=$(active_job)
  [ -n "$job" ] || pause
done

# psctl watch exits 0 if the job SUCCEEDED, 2 if it FAILED or was CANCELLED,
# and 1 on an error (the coordinator unreachable for too long): then the job
# may still run, so watch again.
while :; do
  log "following $job"
  psctl --coordinator="$PS_COORDINATOR" watch "$job" &
  watcher=$!
  while kill -0 "$watcher" 2>/dev/null; do
    check_worker
    pause
  done
  wait "$watcher"
  rc=$?
  watcher=
  case $rc in 0 | 2) break ;; esac
  log "psctl watch $job exited with status $rc; watching again"
  pause
done
log "$job ended (psctl watch status $rc: 0 SUCCEEDED, 2 FAILED or CANCELLED); stopping ps-worker"
kill -TERM "$worker" 2>/dev/null
wait "$worker"
exit 0

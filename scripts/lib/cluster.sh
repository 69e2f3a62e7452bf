# Functions to run a local cluster of real processes on loopback. Source it:
#
#   source scripts/lib/cluster.sh
#   cluster_start BUILD_DIR RUN_DIR NUM_SERVERS NUM_WORKERS   # sets COORDINATOR
#   ... "$BUILD_DIR/client/psctl" --coordinator="$COORDINATOR" submit job.json
#   cluster_stop
#
# Every process picks free ports (port 0) and writes them to RUN_DIR/<name>.ports;
# logs go to RUN_DIR/<name>.log, RocksDB data to RUN_DIR/<name>.data.

CLUSTER_PIDS=()
CLUSTER_NAMES=()
declare -A CLUSTER_CMDS=()  # name -> the command line that started it (%q-quoted)
# Extra flags for worker i, e.g. CLUSTER_WORKER_ARGS[3]="--slowdown=2", and for
# the coordinator (CLUSTER_COORDINATOR_ARGS="--lease_ms=1500") and every server
# (CLUSTER_SERVER_ARGS="--advertise_host=127.0.0.2"); later flags win.
declare -a CLUSTER_WORKER_ARGS=()

# Waits until FILE exists (a process wrote its ports), or fails after 30 s.
cluster_wait_file() {
  local file=$1 i
  for i in $(seq 1 300); do
    [ -s "$file" ] && return 0
    sleep 0.1
  done
  echo "cluster: timed out waiting for $file" >&2
  return 1
}

# Prints the value of KEY (grpc_port or metrics_port) from a port file.
cluster_port() {
  sed -n "s/^$2=//p" "$1"
}

# Starts one process in the background: NAME BINARY ARGS...
cluster_spawn() {
  local name=$1 binary=$2
  shift 2
  rm -f "$CLUSTER_RUN_DIR/$name.ports"
  "$binary" --port_file="$CLUSTER_RUN_DIR/$name.ports" "$@" \
    >>"$CLUSTER_RUN_DIR/$name.log" 2>&1 &
  CLUSTER_PIDS+=($!)
  CLUSTER_NAMES+=("$name")
  CLUSTER_CMDS[$name]=$(printf '%q ' "$binary" "$@")
  cluster_wait_file "$CLUSTER_RUN_DIR/$name.ports"
}

# Index of NAME in CLUSTER_NAMES (the latest process of that name).
cluster_index() {
  local i
  for i in "${!CLUSTER_NAMES[@]}"; do
    [ "${CLUSTER_NAMES[$i]}" = "$1" ] && echo "$i"
  done | tail -n 1
}

# Kills NAME with SIGKILL (a crash) and reaps it.
cluster_kill() {
  local i pid
  i=$(cluster_index "$1")
  pid=${CLUSTER_PIDS[$i]}
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset "CLUSTER_PIDS[$i]" "CLUSTER_NAMES[$i]"
}

# Stops NAME with SIGTERM (a clean stop, as Kubernetes stops a pod), waits
# for it to exit (SIGKILL after 10 s) and returns its exit status (137 if it
# had to be killed).
cluster_terminate() {
  local i pid rc=0
  i=$(cluster_index "$1")
  pid=${CLUSTER_PIDS[$i]}
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || rc=$?
  unset "CLUSTER_PIDS[$i]" "CLUSTER_NAMES[$i]"
  return "$rc"
}

# Starts NAME again with the same flags, on the same gRPC port (a server keeps
# its address, so it gets its place back; the coordinator keeps the address the
# others know).
cluster_restart() {
  local name=$1 port
  port=$(cluster_port "$CLUSTER_RUN_DIR/$name.ports" grpc_port)
  local -a cmd
  eval "cmd=(${CLUSTER_CMDS[$name]})"
  local -a args=()
  local arg
  for arg in "${cmd[@]:1}"; do
    case $arg in --listen=*) ;; *) args+=("$arg") ;; esac
  done
  cluster_spawn "$name" "${cmd[0]}" "${args[@]}" --listen="127.0.0.1:$port"
}

# The executable NAME of BUILD_DIR: BUILD_DIR/SUBDIR/NAME in a build tree, or
# BUILD_DIR/bin/NAME in a folder made by gpu-bundle.sh.
cluster_binary() {
  local subdir=$1 name=$2
  if [ -x "$CLUSTER_BUILD_DIR/$subdir/$name" ]; then
    echo "$CLUSTER_BUILD_DIR/$subdir/$name"
  else
    echo "$CLUSTER_BUILD_DIR/bin/$name"
  fi
}

cluster_start() {
  CLUSTER_BUILD_DIR=$1
  CLUSTER_RUN_DIR=$2
  local servers=$3 workers=$4 i
  mkdir -p "$CLUSTER_RUN_DIR"
  # shellcheck disable=SC2086  # the extra flags are meant to split
  cluster_spawn coordinator "$(cluster_binary coordinator ps-coordinator)" \
    --listen=127.0.0.1:0 --data_dir="$CLUSTER_RUN_DIR/coordinator.data" \
    --heartbeat_interval_ms=200 --lease_ms=5000 ${CLUSTER_COORDINATOR_ARGS:-} || return 1
  COORDINATOR="127.0.0.1:$(cluster_port "$CLUSTER_RUN_DIR/coordinator.ports" grpc_port)"
  for i in $(seq 0 $((servers - 1))); do
    # shellcheck disable=SC2086  # the extra flags are meant to split
    cluster_spawn "server$i" "$(cluster_binary server ps-server)" \
      --coordinator="$COORDINATOR" --data_dir="$CLUSTER_RUN_DIR/server$i.data" \
      ${CLUSTER_SERVER_ARGS:-} || return 1
  done
  for i in $(seq 0 $((workers - 1))); do
    # shellcheck disable=SC2086  # the extra flags are meant to split
    cluster_spawn "worker$i" "$(cluster_binary worker ps-worker)" \
      --coordinator="$COORDINATOR" --device=cpu --compute_threads=1 \
      ${CLUSTER_WORKER_ARGS[$i]:-} || return 1
  done
  export COORDINATOR
}

# Prints "name cpu_seconds" (user + system, from /proc) for every live process
# of the cluster.
cluster_cpu_seconds() {
  local i tick
  tick=$(getconf CLK_TCK)
  for i in "${!CLUSTER_PIDS[@]}"; do
    # Fields 14 and 15 (utime, stime) after the command name's parentheses.
    [ -r "/proc/${CLUSTER_PIDS[$i]}/stat" ] || continue
    sed 's/^.*) //' "/proc/${CLUSTER_PIDS[$i]}/stat" | awk -v n="${CLUSTER_NAMES[$i]}" \
      -v t="$tick" '{ printf "%s %.2f\n", n, ($12 + $13) / t }'
  done
}

# Submits JOB_JSON with `psctl submit --watch` (its output in DIR/watch.log;
# the last lines on stderr if the job fails), then writes the ended job's
# status to DIR/status.json and prints the job's id.
cluster_submit_and_wait() {
  local job=$1 dir=$2 psctl id
  psctl=$(cluster_binary client psctl)
  "$psctl" --coordinator="$COORDINATOR" submit "$job" --watch \
    >"$dir/watch.log" 2>&1 || { tail -n 5 "$dir/watch.log" >&2; return 1; }
  id=$(sed -n 's/^submitted //p' "$dir/watch.log")
  "$psctl" --coordinator="$COORDINATOR" get "$id" >"$dir/status.json" || return 1
  echo "$id"
}

# Prints "name peak_rss_bytes" (VmHWM) for every live process of the cluster.
cluster_peak_rss() {
  local i
  for i in "${!CLUSTER_NAMES[@]}"; do
    awk -v n="${CLUSTER_NAMES[$i]}" '/^VmHWM/ { printf "%s %.0f\n", n, $2 * 1024 }' \
      "/proc/${CLUSTER_PIDS[$i]}/status" 2>/dev/null || true
  done
}

# Prints "name metrics_port" for every process of the cluster.
cluster_metrics_ports() {
  local name
  for name in "${CLUSTER_NAMES[@]}"; do
    echo "$name $(cluster_port "$CLUSTER_RUN_DIR/$name.ports" metrics_port)"
  done
}

# Stops every process with SIGTERM (SIGKILL after 10 s); fails if any process
# exited non-zero on SIGTERM.
cluster_stop() {
  local pid i status=0 rc
  for pid in "${CLUSTER_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # Port files of restarted processes are rewritten; indices may have gaps.
  for i in "${!CLUSTER_PIDS[@]}"; do
    pid=${CLUSTER_PIDS[$i]}
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "cluster: ${CLUSTER_NAMES[$i]} ignored SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      status=1
    fi
    wait "$pid"
    rc=$?
    if [ "$rc" -ne 0 ]; then
      echo "cluster: ${CLUSTER_NAMES[$i]} exited with status $rc" >&2
      status=1
    fi
  done
  CLUSTER_PIDS=()
  CLUSTER_NAMES=()
  return $status
}

#!/usr/bin/env bash
# System test: one local cluster of real processes (1 coordinator, 2 parameter
# servers, 2 workers on loopback, started by scripts/lib/cluster.sh), driven by
# psctl the way a user drives it:
#
#   - training: a small Fashion-MNIST MLP job under BSP, SSP (staleness 2) and ASP
#     ends SUCCEEDED with a test accuracy far above chance;
#   - psctl list / get; gRPC health of every process (psctl health);
#   - bad input: a missing data file fails the job (and the cluster keeps
#     serving), malformed JSON and invalid specs are refused before submission,
#     an unknown job is NOT_FOUND, an unreachable coordinator is reported;
#   - cancel: a long job is cancelled while RUNNING, its workers stop, and the
#     freed nodes run the next job;
#   - every /metrics endpoint passes `promtool check metrics` and has the
#     expected series;
#   - clean shutdown: every process exits 0 on SIGTERM.
#
#   bash tests/system/cluster_test.sh BUILD_DIR SOURCE_DIR
#
# Prints "ok N - ..." per check; stops at the first "not ok" with the relevant
# output and the processes' logs, and keeps the run directory (logs, RocksDB
# data, job specs, psctl output) for inspection. Exits 77 (skipped) when the
# data set or a needed tool is missing. PS_KEEP_RUN_DIR=1 keeps the run
# directory after a pass too. No timing is asserted (design §9): the
# only time limits are generous bounds that keep a hung process from hanging the
# test.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 64
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
PSCTL=$BUILD_DIR/client/psctl
DATA_DIR=${PS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
TRAIN_IMAGES=$DATA_DIR/train-images-idx3-ubyte.gz
TRAIN_LABELS=$DATA_DIR/train-labels-idx1-ubyte.gz
TEST_IMAGES=$DATA_DIR/t10k-images-idx3-ubyte.gz
TEST_LABELS=$DATA_DIR/t10k-labels-idx1-ubyte.gz
MIN_ACCURACY=0.6     # chance is 0.1; 2 epochs on 6000 samples reach about 0.8
WATCH_LIMIT_S=180    # bound on one `psctl submit --watch` (a small job takes seconds)
CALL_LIMIT_S=30      # bound on any other psctl call

for bin in coordinator/ps-coordinator server/ps-server worker/ps-worker client/psctl; do
  if [ ! -x "$BUILD_DIR/$bin" ]; then
    echo "not ok - $BUILD_DIR/$bin is not built" >&2
    exit 1
  fi
done
for tool in curl promtool timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "1..0 # SKIP $tool is not installed"
    exit 77
  fi
done
for file in "$TRAIN_IMAGES" "$TRAIN_LABELS" "$TEST_IMAGES" "$TEST_LABELS"; do
  if [ ! -r "$file" ]; then
    echo "1..0 # SKIP $file is missing (set PS_FASHION_MNIST_DIR)"
    exit 77
  fi
done

# shellcheck source=scripts/lib/cluster.sh disable=SC1091
source "$SOURCE_DIR/scripts/lib/cluster.sh"

RUN_DIR=$(mktemp -d -t ps-system-test.XXXXXX)
START_S=$SECONDS
CHECKS=0

# Prints the processes' logs and keeps RUN_DIR when the test fails; removes it
# when it passes. Always stops whatever is left of the cluster.
on_exit() {
  local rc=$? log
  set +e
  if [ "${#CLUSTER_PIDS[@]}" -gt 0 ]; then
    cluster_stop >/dev/null 2>&1
  fi
  if [ "$rc" -eq 0 ]; then
    if [ "${PS_KEEP_RUN_DIR:-0}" = 1 ]; then
      echo "# run directory kept: $RUN_DIR"
    else
      rm -rf "$RUN_DIR"
    fi
    return
  fi
  for log in "$RUN_DIR"/*.log; do
    [ -e "$log" ] || continue
    echo "----- $(basename "$log") (last 60 lines) -----"
    tail -n 60 "$log"
  done
  echo "# run directory kept: $RUN_DIR"
  echo "# failed after $((SECONDS - START_S)) s"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ok() {
  CHECKS=$((CHECKS + 1))
  echo "ok $CHECKS - $*"
}

# fail MESSAGE [FILE...]: prints "not ok", then each FILE, and exits 1.
fail() {
  local message=$1 file
  shift
  echo "not ok $((CHECKS + 1)) - $message"
  for file in "$@"; do
    [ -e "$file" ] || continue
    echo "----- $(basename "$file") -----"
    cat "$file"
  done
  exit 1
}

# psctl_run NAME [--limit=S] ARGS...: runs psctl against the cluster with stdout
# in RUN_DIR/NAME.out and stderr in RUN_DIR/NAME.err; sets RC (never fails).
psctl_run() {
  local name=$1 limit=$CALL_LIMIT_S
  shift
  case ${1:-} in --limit=*) limit=${1#--limit=}; shift ;; esac
  OUT=$RUN_DIR/$name.out
  ERR=$RUN_DIR/$name.err
  RC=0
  timeout "$limit" "$PSCTL" --coordinator="$COORDINATOR" "$@" >"$OUT" 2>"$ERR" || RC=$?
  if [ "$RC" -eq 124 ]; then
    echo "psctl $* did not finish within $limit s" >>"$ERR"
  fi
}

# write_job FILE NAME EPOCHS CONSISTENCY_JSON [TRAIN_IMAGES]: the small job of
# this test, an MLP 784-64-10 trained with Adam on 6000 samples.
write_job() {
  cat >"$1" <<EOF
{
  "name": "$2",
  "model": {
    "kind": "MLP",
    "input_dim": 784,
    "num_classes": 10,
    "hidden_layers": [64],
    "activation": "RELU"
  },
  "dataset": {
    "format": "IDX",
    "train_images": "${5:-$TRAIN_IMAGES}",
    "train_labels": "$TRAIN_LABELS",
    "test_images": "$TEST_IMAGES",
    "test_labels": "$TEST_LABELS",
    "max_train_samples": 6000,
    "max_test_samples": 2000
  },
  "epochs": $3,
  "batch_size": 32,
  "seed": 42,
  "optimizer": { "adam": { "learning_rate": 0.001 } },
  "consistency": $4,
  "num_workers": 2,
  "num_servers": 2
}
EOF
}

# The job id printed by the last `psctl submit` ("submitted job-000001").
submitted_id() {
  sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' "$OUT"
}

# Sets JOB_COUNT to the number of jobs `psctl list` shows.
count_jobs() {
  psctl_run list list
  [ "$RC" -eq 0 ] || fail "psctl list exits 0 (got $RC)" "$OUT" "$ERR"
  JOB_COUNT=$(grep -c '^job-' "$OUT" || true)
}

# The value of the first `"KEY": VALUE` line in FILE (`psctl get` output),
# without its quotes.
json_field() {
  sed -nE "s/^ *\"$1\": \"?(.*[^\",]|)\"?,?\$/\1/p" "$2" | head -n 1
}

# train LABEL NAME CONSISTENCY_JSON: submits the small job with --watch and
# checks it SUCCEEDED with a test accuracy above MIN_ACCURACY. Sets JOB_ID.
train() {
  local label=$1 name=$2 accuracy
  write_job "$RUN_DIR/$name.json" "$name" 2 "$3"
  psctl_run "$name" --limit="$WATCH_LIMIT_S" submit "$RUN_DIR/$name.json" --watch
  JOB_ID=$(submitted_id)
  if [ "$RC" -ne 0 ] || ! grep -q "^job $JOB_ID SUCCEEDED" "$OUT"; then
    fail "$label job ends SUCCEEDED (psctl exit $RC, expected 0)" "$OUT" "$ERR"
  fi
  accuracy=$(sed -n 's/^test accuracy: \([0-9.]*\) .*/\1/p' "$OUT")
  if [ -z "$accuracy" ]; then
    fail "$label job prints its test accuracy" "$OUT" "$ERR"
  fi
  if ! awk -v a="$accuracy" -v min="$MIN_ACCURACY" 'BEGIN { exit !(a > min) }'; then
    fail "$label job reaches test accuracy > $MIN_ACCURACY (got $accuracy)" "$OUT"
  fi
  ok "$label: $JOB_ID SUCCEEDED, test accuracy $accuracy > $MIN_ACCURACY"
}

# Fails unless every process of the cluster is still running.
all_alive() {
  local i
  for i in "${!CLUSTER_PIDS[@]}"; do
    kill -0 "${CLUSTER_PIDS[$i]}" 2>/dev/null ||
      fail "${CLUSTER_NAMES[$i]} (pid ${CLUSTER_PIDS[$i]}) is still running"
  done
}

# Sum of a metric's samples in a scraped file (0 if absent).
metric_sum() {
  awk -v name="$1" '$1 == name || index($1, name "{") == 1 { s += $NF } END { print s + 0 }' "$2"
}

# scrape NAME FILE: saves NAME's /metrics to FILE.
scrape() {
  local port
  port=$(cluster_port "$RUN_DIR/$1.ports" metrics_port)
  curl -sS --fail --max-time 10 "http://127.0.0.1:$port/metrics" >"$2" 2>"$2.err" ||
    fail "GET http://127.0.0.1:$port/metrics of $1" "$2.err"
}

# ---------------------------------------------------------------------------
echo "# run directory: $RUN_DIR"
cluster_start "$BUILD_DIR" "$RUN_DIR" 2 2 || fail "cluster of 1 coordinator, 2 servers, 2 workers starts"
ok "cluster started: coordinator at $COORDINATOR, pids ${CLUSTER_PIDS[*]}"

# --- 1, 2: the three consistency models train in real processes --------------
SUCCEEDED_JOBS=()
train "BSP" small-bsp '{ "model": "BSP" }'
SUCCEEDED_JOBS+=("$JOB_ID")
train "SSP (staleness 2)" small-ssp '{ "model": "SSP", "staleness": 2 }'
SUCCEEDED_JOBS+=("$JOB_ID")
train "ASP" small-asp '{ "model": "ASP" }'
SUCCEEDED_JOBS+=("$JOB_ID")

# --- 3: psctl list / get ------------------------------------------------------
psctl_run list list
[ "$RC" -eq 0 ] || fail "psctl list exits 0 (got $RC)" "$OUT" "$ERR"
for id in "${SUCCEEDED_JOBS[@]}"; do
  grep -Eq "^$id +SUCCEEDED +small-" "$OUT" || fail "psctl list shows $id SUCCEEDED" "$OUT"
done
ok "psctl list shows ${SUCCEEDED_JOBS[*]} SUCCEEDED"
for id in "${SUCCEEDED_JOBS[@]}"; do
  psctl_run "get-$id" get "$id"
  [ "$RC" -eq 0 ] || fail "psctl get $id exits 0 (got $RC)" "$OUT" "$ERR"
  grep -q '^ *"state": "SUCCEEDED",$' "$OUT" || fail "psctl get $id prints \"state\": \"SUCCEEDED\"" "$OUT"
  [ "$(json_field job_id "$OUT")" = "$id" ] || fail "psctl get $id prints \"job_id\": \"$id\"" "$OUT"
done
ok "psctl get prints JSON with \"state\": \"SUCCEEDED\" for each"

# --- 5: gRPC health of every process ------------------------------------------
for name in "${CLUSTER_NAMES[@]}"; do
  address=127.0.0.1:$(cluster_port "$RUN_DIR/$name.ports" grpc_port)
  psctl_run "health-$name" health "$address"
  if [ "$RC" -ne 0 ] || [ "$(cat "$OUT")" != SERVING ]; then
    fail "psctl health $address ($name) prints SERVING and exits 0 (got $RC)" "$OUT" "$ERR"
  fi
done
ok "gRPC health: ${CLUSTER_NAMES[*]} are SERVING"
psctl_run health-nothing health 127.0.0.1:1
if [ "$RC" -ne 1 ] || ! grep -q 'not reachable' "$ERR"; then
  fail "psctl health 127.0.0.1:1 (nothing listening) exits 1, not reachable (got $RC)" "$OUT" "$ERR"
fi
ok "psctl health 127.0.0.1:1 (nothing listening) exits 1: $(head -c 60 "$ERR")..."

# --- 6a: a missing data file fails the job; the cluster keeps serving ---------
MISSING=$RUN_DIR/no-such-dir/train-images-idx3-ubyte.gz
write_job "$RUN_DIR/missing.json" missing-data 2 '{ "model": "BSP" }' "$MISSING"
psctl_run missing --limit="$WATCH_LIMIT_S" submit "$RUN_DIR/missing.json" --watch
FAILED_ID=$(submitted_id)
if [ -z "$FAILED_ID" ] || [ "$RC" -ne 2 ]; then
  fail "job with a missing train_images is submitted and ends not SUCCEEDED (psctl exit 2, got $RC)" "$OUT" "$ERR"
fi
psctl_run get-missing get "$FAILED_ID"
[ "$RC" -eq 0 ] || fail "psctl get $FAILED_ID exits 0 (got $RC)" "$OUT" "$ERR"
[ "$(json_field state "$OUT")" = FAILED ] || fail "job $FAILED_ID with a missing train_images ends FAILED" "$OUT"
MESSAGE=$(json_field message "$OUT")
[[ $MESSAGE == *"$MISSING"* ]] || fail "the FAILED job's message names $MISSING" "$OUT"
ok "missing train_images: $FAILED_ID FAILED with message \"$MESSAGE\""
all_alive
train "after the FAILED job, the cluster still serves: BSP" after-failure '{ "model": "BSP" }'
SUCCEEDED_JOBS+=("$JOB_ID")

# --- 6b: malformed JSON is refused before submission --------------------------
count_jobs
JOBS_BEFORE=$JOB_COUNT
write_job "$RUN_DIR/good.json" good 2 '{ "model": "BSP" }'
head -c 200 "$RUN_DIR/good.json" >"$RUN_DIR/truncated.json"
psctl_run truncated submit "$RUN_DIR/truncated.json"
if [ "$RC" -ne 1 ] || ! grep -q "^psctl: $RUN_DIR/truncated.json: job spec is not valid JSON for ps.v1.JobSpec: ." "$ERR"; then
  fail "truncated JSON: psctl exits 1 with the parser's message (got $RC)" "$OUT" "$ERR"
fi
ok "truncated JSON refused: $(tr '\n' ' ' <"$ERR")"
sed 's/"epochs":/"epochz":/' "$RUN_DIR/good.json" >"$RUN_DIR/epochz.json"
psctl_run epochz submit "$RUN_DIR/epochz.json"
if [ "$RC" -ne 1 ] || ! grep -q "^psctl: $RUN_DIR/epochz.json: .*epochz" "$ERR"; then
  fail "unknown field \"epochz\": psctl exits 1 with the parser's message naming it (got $RC)" "$OUT" "$ERR"
fi
ok "unknown field refused: $(cat "$ERR")"

# --- 6c: invalid specs are refused with INVALID_ARGUMENT naming the field -----
sed 's/"batch_size": 32/"batch_size": 0/' "$RUN_DIR/good.json" >"$RUN_DIR/batch0.json"
psctl_run batch0 submit "$RUN_DIR/batch0.json"
if [ "$RC" -ne 1 ] || ! grep -q 'batch_size.*(INVALID_ARGUMENT)$' "$ERR"; then
  fail "batch_size 0: psctl exits 1 with INVALID_ARGUMENT naming batch_size (got $RC)" "$OUT" "$ERR"
fi
ok "batch_size 0 refused: $(cat "$ERR")"
write_job "$RUN_DIR/stale.json" stale 2 '{ "model": "SSP", "staleness": -1 }'
psctl_run stale submit "$RUN_DIR/stale.json"
if [ "$RC" -ne 1 ] || ! grep -q 'consistency.staleness.*(INVALID_ARGUMENT)$' "$ERR"; then
  fail "SSP staleness -1: psctl exits 1 with INVALID_ARGUMENT naming consistency.staleness (got $RC)" "$OUT" "$ERR"
fi
ok "SSP staleness -1 refused: $(cat "$ERR")"
count_jobs
JOBS_AFTER=$JOB_COUNT
[ "$JOBS_AFTER" -eq "$JOBS_BEFORE" ] ||
  fail "refused specs create no job (psctl list: $JOBS_BEFORE jobs before, $JOBS_AFTER after)" "$RUN_DIR/list.out"
ok "refused specs created no job (psctl list still shows $JOBS_AFTER)"

# --- 6d, 6e: unknown job, unreachable coordinator -----------------------------
psctl_run get-unknown get job-999999
if [ "$RC" -ne 1 ] || ! grep -q '(NOT_FOUND)$' "$ERR"; then
  fail "psctl get job-999999 exits 1 with NOT_FOUND (got $RC)" "$OUT" "$ERR"
fi
ok "psctl get job-999999: $(cat "$ERR")"
RC=0
timeout "$CALL_LIMIT_S" "$PSCTL" --coordinator=127.0.0.1:1 --timeout_ms=5000 list \
  >"$RUN_DIR/unreachable.out" 2>"$RUN_DIR/unreachable.err" || RC=$?
if [ "$RC" -eq 0 ] || [ "$RC" -eq 124 ] ||
    ! grep -q 'coordinator at 127.0.0.1:1 is not reachable' "$RUN_DIR/unreachable.err"; then
  fail "psctl --coordinator=127.0.0.1:1 list exits non-zero, coordinator not reachable (got $RC)" \
    "$RUN_DIR/unreachable.out" "$RUN_DIR/unreachable.err"
fi
ok "psctl --coordinator=127.0.0.1:1 list exits $RC: $(head -c 60 "$RUN_DIR/unreachable.err")..."

# --- 7: cancel a RUNNING job; its workers stop; the nodes run the next job ----
write_job "$RUN_DIR/long.json" long 50 '{ "model": "BSP" }'
psctl_run long submit "$RUN_DIR/long.json"
LONG_ID=$(submitted_id)
if [ "$RC" -ne 0 ] || [ -z "$LONG_ID" ]; then
  fail "the long job is submitted (got $RC)" "$OUT" "$ERR"
fi
# Wait until it is RUNNING and has trained (clock > 0), so that the cancel
# interrupts real work.
state=
for _ in $(seq 1 600); do
  psctl_run get-long get "$LONG_ID"
  state=$(json_field state "$OUT")
  clock=$(json_field clock "$OUT")
  [ "$state" = RUNNING ] && [ "${clock:-0}" -gt 0 ] && break
  [ "$state" = PENDING ] || [ "$state" = RUNNING ] || break
  sleep 0.1
done
[ "$state" = RUNNING ] || fail "the long job $LONG_ID reaches RUNNING (state $state)" "$OUT" "$ERR"
ok "$LONG_ID is RUNNING (clock $clock)"
psctl_run cancel cancel "$LONG_ID"
if [ "$RC" -ne 0 ] || ! grep -q "^job $LONG_ID CANCELLED" "$OUT"; then
  fail "psctl cancel $LONG_ID exits 0 and prints CANCELLED (got $RC)" "$OUT" "$ERR"
fi
psctl_run get-cancelled get "$LONG_ID"
[ "$(json_field state "$OUT")" = CANCELLED ] || fail "psctl get $LONG_ID shows CANCELLED" "$OUT" "$ERR"
CANCEL_EPOCH=$(json_field epoch "$OUT")
[ "$CANCEL_EPOCH" -lt 50 ] || fail "$LONG_ID was cancelled before it finished (epoch $CANCEL_EPOCH)" "$OUT"
ok "psctl cancel $LONG_ID: state CANCELLED at epoch $CANCEL_EPOCH of 50"
psctl_run watch-cancelled watch "$LONG_ID"
if [ "$RC" -ne 2 ] || ! grep -q "^job $LONG_ID CANCELLED" "$OUT"; then
  fail "psctl watch $LONG_ID (cancelled) exits 2 and prints CANCELLED (got $RC)" "$OUT" "$ERR"
fi
psctl_run cancel-again cancel "$LONG_ID"
if [ "$RC" -ne 1 ] || ! grep -q '(FAILED_PRECONDITION)$' "$ERR"; then
  fail "psctl cancel $LONG_ID again exits 1 with FAILED_PRECONDITION (got $RC)" "$OUT" "$ERR"
fi
ok "psctl watch of the cancelled job exits 2; cancelling it again: $(cat "$ERR")"
# The workers must stop training the cancelled job: their step counters settle.
stopped=false
for _ in $(seq 1 20); do
  scrape worker0 "$RUN_DIR/w0.a"; scrape worker1 "$RUN_DIR/w1.a"
  sleep 1
  scrape worker0 "$RUN_DIR/w0.b"; scrape worker1 "$RUN_DIR/w1.b"
  if [ "$(metric_sum ps_worker_steps_total "$RUN_DIR/w0.a")" = "$(metric_sum ps_worker_steps_total "$RUN_DIR/w0.b")" ] &&
      [ "$(metric_sum ps_worker_steps_total "$RUN_DIR/w1.a")" = "$(metric_sum ps_worker_steps_total "$RUN_DIR/w1.b")" ]; then
    stopped=true
    break
  fi
done
$stopped || fail "the workers stop training the cancelled job (ps_worker_steps_total still grows after 20 s)" \
  "$RUN_DIR/w0.b" "$RUN_DIR/w1.b"
ok "the workers stopped training $LONG_ID (ps_worker_steps_total settled)"
train "after the cancel, the freed nodes run: BSP" after-cancel '{ "model": "BSP" }'
SUCCEEDED_JOBS+=("$JOB_ID")

# --- 4: /metrics of every process ---------------------------------------------
while read -r name port; do
  file=$RUN_DIR/$name.metrics
  scrape "$name" "$file"
  promtool check metrics <"$file" >"$file.lint" 2>&1 ||
    fail "promtool check metrics accepts $name's /metrics (port $port)" "$file.lint"
  case $name in
    coordinator) expected='ps_jobs{state="SUCCEEDED"} ps_rpc_requests_total' ;;
    server*) expected='ps_updates_applied_total ps_pull_wait_seconds_bucket ps_store_write_latency_seconds_count ps_rpc_requests_total' ;;
    worker*) expected='ps_worker_samples_per_second ps_worker_steps_total' ;;
    *) fail "unknown process $name" ;;
  esac
  for metric in $expected; do
    grep -qF "$metric" <(grep -v '^#' "$file") || fail "$name's /metrics has $metric" "$file"
  done
  ok "$name /metrics (port $port) passes promtool check metrics and has: $expected"
done < <(cluster_metrics_ports)
# The values tell the story of this run.
file=$RUN_DIR/coordinator.metrics
for want in "SUCCEEDED ${#SUCCEEDED_JOBS[@]}" "FAILED 1" "CANCELLED 1" "RUNNING 0" "PENDING 0"; do
  read -r state count <<<"$want"
  got=$(metric_sum "ps_jobs{state=\"$state\"}" "$file")
  [ "$got" = "$count" ] || fail "coordinator ps_jobs{state=\"$state\"} is $count (got $got)" "$file"
done
ok "coordinator ps_jobs: ${#SUCCEEDED_JOBS[@]} SUCCEEDED, 1 FAILED, 1 CANCELLED, none RUNNING or PENDING"
for name in server0 server1; do
  got=$(metric_sum ps_updates_applied_total "$RUN_DIR/$name.metrics")
  awk -v v="$got" 'BEGIN { exit !(v > 0) }' || fail "$name applied updates (ps_updates_applied_total $got)" "$RUN_DIR/$name.metrics"
done
for name in worker0 worker1; do
  got=$(metric_sum ps_worker_steps_total "$RUN_DIR/$name.metrics")
  awk -v v="$got" 'BEGIN { exit !(v > 0) }' || fail "$name trained (ps_worker_steps_total $got)" "$RUN_DIR/$name.metrics"
done
ok "both servers applied updates and both workers trained"

# --- 8: clean shutdown --------------------------------------------------------
all_alive
STOP_START=$SECONDS
if cluster_stop 2>"$RUN_DIR/stop.err"; then
  ok "SIGTERM: every process exited 0 within 10 s (took $((SECONDS - STOP_START)) s)"
else
  fail "SIGTERM: every process exits 0 within 10 s" "$RUN_DIR/stop.err"
fi

echo "1..$CHECKS"
echo "# all $CHECKS checks passed in $((SECONDS - START_S)) s"

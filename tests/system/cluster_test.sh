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
#   - export: psctl export writes a SUCCEEDED job's model file, and psctl eval
#     of it prints exactly the job's test accuracy; jobs that did not succeed
#     have no model (NOT_FOUND); a truncated model file is DATA_LOSS;
#   - every /metrics endpoint passes `promtool check metrics` and has the
#     expected series;
#   - delete: psctl delete refuses an unknown job (NOT_FOUND) and one that has
#     not ended (FAILED_PRECONDITION), and deletes an ended one;
#   - clean shutdown: every process exits 0 on SIGTERM, and the servers' data
#     directories hold no table files or write-ahead log of the ended jobs;
#   - a peer that is slow for a moment (paused 2 s) does not fail a call with a
#     10 s deadline.
#
#   bash tests/system/cluster_test.sh BUILD_DIR SOURCE_DIR
#
# Prints "ok N - ..." per check and stops at the first "not ok" with the
# relevant output and the processes' logs. A check that reveals a known product
# bug prints "not ok N - ... # BUG: ..." and lets the others run; the test then
# fails at the end. A failing test keeps its run directory (logs, RocksDB data,
# job specs, psctl output); PS_KEEP_RUN_DIR=1 keeps it after a pass too. Exits
# 77 (skipped) when the data set or a needed tool is missing. No timing is
# asserted (timing belongs in bench/: the machine is shared and noisy); the
# only time limits are generous bounds that keep a hung process from hanging
# the test.
set -euo pipefail

# The script is one compound command, parsed whole before it runs, so that a
# checkout or an edit of this file while the test runs cannot change what runs.
{
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
BUGS=0
CONNECT_RETRIES=0
ONLY_KNOWN_BUGS=0

# Prints the processes' logs and keeps RUN_DIR when the test fails; removes it
# when it passes. Always stops whatever is left of the cluster.
# shellcheck disable=SC2317  # called by the EXIT trap
on_exit() {
  local rc=$? log
  set +e
  if [ "${#CLUSTER_PIDS[@]}" -gt 0 ]; then
    kill -CONT "${CLUSTER_PIDS[@]}" 2>/dev/null  # in case a pause was cut short
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
  if [ "$ONLY_KNOWN_BUGS" = 1 ]; then
    # Every other check passed: the RocksDB data (hundreds of MB) tells nothing.
    rm -rf "$RUN_DIR"/*.data
  fi
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
    if connect_failed "$file"; then
      echo "# this is the known 100 ms connect timeout of common/grpc_util.cc (see the # BUG check)"
    fi
  done
  exit 1
}

# bug MESSAGE DETAIL: a check that reveals a known product bug failed. Prints
# "not ok" and lets the test go on; the test fails at the end.
bug() {
  CHECKS=$((CHECKS + 1))
  BUGS=$((BUGS + 1))
  echo "not ok $CHECKS - $1 # BUG: $2"
}

# paused NAME SECONDS CMD...: runs CMD while process NAME is stopped (SIGSTOP)
# for SECONDS; returns CMD's status.
paused() {
  local name=$1 seconds=$2 i pid="" sleeper rc=0
  shift 2
  for i in "${!CLUSTER_NAMES[@]}"; do
    [ "${CLUSTER_NAMES[$i]}" = "$name" ] && pid=${CLUSTER_PIDS[$i]}
  done
  [ -n "$pid" ] || fail "no process $name"
  kill -STOP "$pid"
  (sleep "$seconds"; kill -CONT "$pid") &
  sleeper=$!
  "$@" || rc=$?
  wait "$sleeper"
  kill -CONT "$pid"
  return "$rc"
}

# True if psctl's stderr FILE says no connection could be made although
# something listens (the call was never sent).
connect_failed() {
  grep -q 'failed to connect to all addresses' "$1" && ! grep -q 'Connection refused' "$1"
}

# psctl_run NAME [--limit=S] ARGS...: runs psctl against the cluster with stdout
# in RUN_DIR/NAME.out and stderr in RUN_DIR/NAME.err; sets RC (never fails).
psctl_run() {
  local name=$1 limit=$CALL_LIMIT_S
  shift
  case ${1:-} in --limit=*) limit=${1#--limit=}; shift ;; esac
  OUT=$RUN_DIR/$name.out
  ERR=$RUN_DIR/$name.err
  local attempt
  for attempt in 1 2 3 4 5; do
    RC=0
    timeout "$limit" "$PSCTL" --coordinator="$COORDINATOR" "$@" >"$OUT" 2>"$ERR" || RC=$?
    # The connect-timeout bug (see the # BUG check below) fails calls at random
    # on a loaded machine before they are sent ("failed to connect", though the
    # peer is up); retry those, and only those, so that the other checks test
    # what they are about. The dedicated check reveals the bug.
    if [ "$RC" -eq 1 ] && [ "$attempt" -lt 5 ] && connect_failed "$ERR" &&
        ! grep -q '^submitted ' "$OUT"; then
      CONNECT_RETRIES=$((CONNECT_RETRIES + 1))
      echo "# retrying psctl $* after: $(cat "$ERR")"
      continue
    fi
    break
  done
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

# --- 7b: export a trained model; psctl eval reproduces the job's accuracy ----
EXPORT_ID=${SUCCEEDED_JOBS[0]}
JOB_ACCURACY=$(sed -n 's/^test accuracy: \([0-9.]*\) .*/\1/p' "$RUN_DIR/small-bsp.out")
MODEL=$RUN_DIR/model.bin
psctl_run export export "$EXPORT_ID" --output="$MODEL"
if [ "$RC" -ne 0 ] || [ ! -s "$MODEL" ] || [ "$(head -c 8 "$MODEL")" != PSMODEL1 ]; then
  fail "psctl export $EXPORT_ID --output=$MODEL exits 0 and writes a PSMODEL1 file (got $RC)" "$OUT" "$ERR"
fi
grep -q '"name": "dense0.weight"' "$MODEL" || fail "the model file's JSON header names dense0.weight" "$MODEL"
ok "psctl export $EXPORT_ID: $(cat "$OUT")"
psctl_run export-o export "$EXPORT_ID" -o "$RUN_DIR/model-o.bin"
if [ "$RC" -ne 0 ] || ! cmp -s "$MODEL" "$RUN_DIR/model-o.bin"; then
  fail "psctl export $EXPORT_ID -o FILE exits 0 and writes the same file (got $RC)" "$OUT" "$ERR"
fi
ok "psctl export -o FILE writes the same file"
# The job evaluated on its first 2000 test samples (max_test_samples).
psctl_run eval eval "$MODEL" --images="$TEST_IMAGES" --labels="$TEST_LABELS" --max_samples=2000
EVAL_ACCURACY=$(sed -n 's/^accuracy \([0-9.]*\) (2000 samples)$/\1/p' "$OUT")
RECORDED=$(sed -n 's/.*recorded test accuracy \([0-9.]*\) (2000 samples)$/\1/p' "$OUT")
if [ "$RC" -ne 0 ] || [ -z "$EVAL_ACCURACY" ]; then
  fail "psctl eval $MODEL exits 0 and prints \"accuracy X (2000 samples)\" (got $RC)" "$OUT" "$ERR"
fi
if [ "$EVAL_ACCURACY" != "$JOB_ACCURACY" ] || [ "$RECORDED" != "$JOB_ACCURACY" ]; then
  fail "psctl eval prints the job's test accuracy $JOB_ACCURACY (got $EVAL_ACCURACY, recorded $RECORDED)" \
    "$OUT" "$RUN_DIR/small-bsp.out"
fi
ok "psctl eval: accuracy $EVAL_ACCURACY on 2000 samples, equal to $EXPORT_ID's reported $JOB_ACCURACY"
psctl_run eval-all eval "$MODEL"
grep -q '^accuracy 0\.[0-9]\{4\} (10000 samples)$' "$OUT" ||
  fail "psctl eval $MODEL (default: the whole Fashion-MNIST test set) prints its accuracy" "$OUT" "$ERR"
ok "psctl eval on the default test set: $(tail -n 1 "$OUT")"
for id in "$FAILED_ID" "$LONG_ID" job-999999; do
  psctl_run "export-$id" export "$id" --output="$RUN_DIR/none.bin"
  if [ "$RC" -ne 1 ] || ! grep -q '(NOT_FOUND)$' "$ERR" || [ -e "$RUN_DIR/none.bin" ]; then
    fail "psctl export $id (not SUCCEEDED) exits 1 with NOT_FOUND and writes nothing (got $RC)" "$OUT" "$ERR"
  fi
done
ok "psctl export of a FAILED, a CANCELLED and an unknown job: NOT_FOUND ($(cat "$RUN_DIR/export-$FAILED_ID.err"))"
psctl_run export-no-output export "$EXPORT_ID"
[ "$RC" -eq 64 ] || fail "psctl export without --output exits 64 (got $RC)" "$OUT" "$ERR"
head -c 1000 "$MODEL" >"$RUN_DIR/truncated.bin"
psctl_run eval-truncated eval "$RUN_DIR/truncated.bin"
if [ "$RC" -ne 1 ] || ! grep -q "truncated.bin.*(DATA_LOSS)$" "$ERR"; then
  fail "psctl eval of a truncated model file exits 1 with DATA_LOSS naming it (got $RC)" "$OUT" "$ERR"
fi
ok "psctl eval of a truncated model file: $(cat "$ERR")"

# --- a slow peer must not fail a call that has a 10 s deadline ---------------
# A process that answers the connection late (stopped for 2 s here; on this
# shared 2-core machine, one that is not scheduled for a few hundred ms) must
# not fail a call whose deadline is 10 s. It does: CreateChannel
# (common/grpc_util.cc) sets GRPC_ARG_MIN_RECONNECT_BACKOFF_MS to 100, which
# gRPC also uses as the minimum connect timeout, so a connection attempt whose
# HTTP/2 handshake takes over ~100 ms fails and the call fails at once with
# UNAVAILABLE "connection attempt timed out before receiving SETTINGS frame".
# Every channel of the system is made there; psctl's calls are not retried.
for target in coordinator worker0; do
  if [ "$target" = coordinator ]; then
    cmd=(list)
  else
    cmd=(health "127.0.0.1:$(cluster_port "$RUN_DIR/$target.ports" grpc_port)")
  fi
  RC=0
  paused "$target" 2 timeout "$CALL_LIMIT_S" "$PSCTL" --coordinator="$COORDINATOR" \
    --timeout_ms=10000 "${cmd[@]}" >"$RUN_DIR/paused-$target.out" 2>"$RUN_DIR/paused-$target.err" || RC=$?
  if [ "$RC" -eq 0 ]; then
    ok "psctl ${cmd[0]} (10 s deadline) succeeds while $target is paused for 2 s"
  else
    bug "psctl ${cmd[0]} (10 s deadline) succeeds while $target is paused for 2 s (exit $RC: $(cat "$RUN_DIR/paused-$target.err"))" \
      "a connection attempt times out after ~100 ms: GRPC_ARG_MIN_RECONNECT_BACKOFF_MS=100 in CreateChannel, common/grpc_util.cc"
  fi
done
all_alive

# --- 4: /metrics of every process ---------------------------------------------
while read -r name port; do
  file=$RUN_DIR/$name.metrics
  scrape "$name" "$file"
  promtool check metrics <"$file" >"$file.lint" 2>&1 ||
    fail "promtool check metrics accepts $name's /metrics (port $port)" "$file.lint"
  case $name in
    coordinator) expected='ps_jobs{state="SUCCEEDED"} ps_rpc_requests_total ps_vacant_places{role="server"} ps_recovery_deadline_timestamp_seconds' ;;
    server*) expected='ps_updates_applied_total ps_pull_wait_seconds_bucket ps_store_write_latency_seconds_count ps_rpc_requests_total' ;;
    worker*) expected='ps_worker_samples_per_second ps_worker_steps_total' ;;
    *) fail "unknown process $name" ;;
  esac
  expected="$expected process_start_time_seconds"
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

# --- 7c: psctl delete ---------------------------------------------------------
# After the metrics checks: deleting a job changes the coordinator's ps_jobs.
psctl_run delete-unknown delete job-999999
if [ "$RC" -ne 1 ] || ! grep -q '(NOT_FOUND)$' "$ERR"; then
  fail "psctl delete job-999999 exits 1 with NOT_FOUND (got $RC)" "$OUT" "$ERR"
fi
# A job needing three servers waits PENDING on this two-server cluster.
write_job "$RUN_DIR/waiting.json" waiting 1 '{ "model": "BSP" }'
sed -i 's/"num_servers": 2/"num_servers": 3/' "$RUN_DIR/waiting.json"
psctl_run waiting submit "$RUN_DIR/waiting.json"
WAITING_ID=$(submitted_id)
[ "$RC" -eq 0 ] && [ -n "$WAITING_ID" ] || fail "psctl submit of a job waiting for a third server exits 0 (got $RC)" "$OUT" "$ERR"
psctl_run delete-pending delete "$WAITING_ID"
if [ "$RC" -ne 1 ] || ! grep -q '(FAILED_PRECONDITION)$' "$ERR"; then
  fail "psctl delete $WAITING_ID (PENDING) exits 1 with FAILED_PRECONDITION (got $RC)" "$OUT" "$ERR"
fi
ok "psctl delete of an unknown job: NOT_FOUND; of a PENDING one: $(cat "$ERR")"
psctl_run cancel-waiting cancel "$WAITING_ID"
[ "$RC" -eq 0 ] || fail "psctl cancel $WAITING_ID exits 0 (got $RC)" "$OUT" "$ERR"
for id in "$WAITING_ID" "$FAILED_ID" "$EXPORT_ID"; do
  psctl_run "delete-$id" delete "$id"
  [ "$RC" -eq 0 ] || fail "psctl delete $id (ended) exits 0 (got $RC)" "$OUT" "$ERR"
  psctl_run "get-deleted-$id" get "$id"
  if [ "$RC" -ne 1 ] || ! grep -q '(NOT_FOUND)$' "$ERR"; then
    fail "psctl get $id after psctl delete exits 1 with NOT_FOUND (got $RC)" "$OUT" "$ERR"
  fi
done
count_jobs
psctl_run export-deleted export "$EXPORT_ID" --output="$RUN_DIR/deleted.bin"
[ "$RC" -eq 1 ] || fail "psctl export of the deleted $EXPORT_ID exits 1 (got $RC)" "$OUT" "$ERR"
ok "psctl delete of ended jobs $WAITING_ID $FAILED_ID $EXPORT_ID: get and export are NOT_FOUND; $JOB_COUNT jobs listed"

# --- 8: clean shutdown --------------------------------------------------------
all_alive
STOP_START=$SECONDS
if cluster_stop 2>"$RUN_DIR/stop.err"; then
  ok "SIGTERM: every process exited 0 within 10 s (took $((SECONDS - STOP_START)) s)"
else
  fail "SIGTERM: every process exits 0 within 10 s" "$RUN_DIR/stop.err"
fi
# Every job ended, so the servers deleted their shards, and a clean exit
# flushes (no write-ahead log left): no table file or log holds job data.
for name in server0 server1; do
  data=$RUN_DIR/$name.data
  bytes=$(find "$data" -maxdepth 1 -type f \( -name '*.sst' -o -name '*.log' \) -printf '%s\n' |
    awk '{ s += $1 } END { print s + 0 }')
  [ "$bytes" -lt 65536 ] ||
    fail "$name's data directory holds no job data after the jobs ended and a clean exit ($bytes bytes of *.sst and *.log)" \
      <(ls -l "$data")
  ok "$name's data directory after the jobs and a clean exit: $bytes bytes of *.sst and *.log ($(du -sb "$data" | cut -f1) bytes in all)"
done

echo "1..$CHECKS"
if [ "$CONNECT_RETRIES" -gt 0 ]; then
  echo "# $CONNECT_RETRIES psctl calls were retried after the connect-timeout bug"
fi
if [ "$BUGS" -gt 0 ]; then
  ONLY_KNOWN_BUGS=1
  echo "# $BUGS of $CHECKS checks revealed known product bugs (# BUG above); the others passed in $((SECONDS - START_S)) s"
  exit 1
fi
echo "# all $CHECKS checks passed in $((SECONDS - START_S)) s"
exit 0
}

#!/usr/bin/env bash
# The chaos run: trains a job on a local cluster while killing random processes
# (servers, workers, the coordinator) with SIGKILL at random moments and
# restarting them, then reports faults injected and survived, acknowledged
# updates lost (must be 0), jobs finished and the final accuracy against an
# uninterrupted run of the same job.
#
#   scripts/chaos.sh [--ctr] [--faults N] [--seed S] [--build DIR] [--epochs E]
#                    [--samples N] [--victims "worker1 server0 coordinator"]
#                    [--pipeline_parts P] [--scales K]
#                    [--sparse_memory_bytes B]
#
# The job is an MLP on Fashion-MNIST, or with --ctr a CTR model on sparse
# embedding tables (docs/sparse.md) trained on Criteo-format data that
# bench/criteo_gen.py writes (--samples training rows; default 12000 samples
# and 3 epochs, with --ctr 30000 rows and 2 epochs).
#
# Victims are random among server0, server1, worker0, worker1 and the
# coordinator, or taken in turn from --victims.
#
# With --scales K (dense jobs), the cluster has a third server, and K server
# moves (psctl scale: 2 -> 3, then 3 -> 2, and so on; docs/operations.md,
# "Scaling a job's servers") are mixed with the kills at random moments: a
# move a kill interrupts is abandoned or finishes, a scale refused (a move
# or a vacancy in progress) is tried again for a few seconds. The checks
# are the same: the job succeeds, nothing acknowledged is lost, the final
# accuracy is the uninterrupted run's.
#
# With --sparse_memory_bytes B (--ctr), every server runs under that sparse
# memory budget (docs/sparse.md, "Memory: the budget and the estimate"): most
# rows live in the servers' disk tiers, and every snapshot reads them back
# from there (docs/sparse.md, "Snapshots of a tiered table"); the checks are
# the same, both runs under the budget.
#
# Exit status 0 only if every fault was survived, no acknowledged update was
# lost, the job SUCCEEDED with every worker's last clock acknowledged, and its
# accuracy is within 1 point of the uninterrupted run; with --ctr, its test AUC
# and log loss equal the uninterrupted run's exactly (BSP with two workers
# computes the same rows bit for bit, so a row update lost or applied twice
# shows; within 0.01 when a worker was killed between its push reaching one
# server and the other, which its replacement logs), and each restarted server
# reloads sparse rows (exit status 77, skipped, without /usr/bin/python3 and
# numpy). The test suite runs short versions (tests/system).
#
# How loss is detected: every worker appends "<job> <worker> <clock>" to an ack
# log after each acknowledged push (--ack_log). Before a server is killed, the
# largest acknowledged clock of each worker is noted; the restarted server logs
# the worker clocks it reloaded from RocksDB, and each must be above that mark.
set -uo pipefail
cd "$(dirname "$0")/.."
FAULTS=6
SEED=$RANDOM
BUILD_DIR=build
EPOCHS=""
SAMPLES=""
VICTIMS=()
MODE=dense
PIPELINE_PARTS=0  # The MLP job's consistency.pipeline_parts (docs/consistency.md).
SCALES=0
SPARSE_MEMORY_BYTES=0
while [ $# -gt 0 ]; do
  case $1 in
    --ctr) MODE=ctr; shift ;;
    --faults) FAULTS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --build) BUILD_DIR=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --victims) read -r -a VICTIMS <<<"$2"; shift 2 ;;
    --pipeline_parts) PIPELINE_PARTS=$2; shift 2 ;;
    --scales) SCALES=$2; shift 2 ;;
    --sparse_memory_bytes) SPARSE_MEMORY_BYTES=$2; shift 2 ;;
    *) echo "usage: $0 [--ctr] [--faults N] [--seed S] [--build DIR] [--epochs E] [--samples N] [--victims LIST] [--pipeline_parts P] [--scales K] [--sparse_memory_bytes B]" >&2; exit 64 ;;
  esac
done
if [ $MODE = ctr ]; then
  SAMPLES=${SAMPLES:-30000} EPOCHS=${EPOCHS:-2}
else
  SAMPLES=${SAMPLES:-12000} EPOCHS=${EPOCHS:-3}
fi
RANDOM=$SEED
RUN_DIR=$(mktemp -d -t ps-chaos.XXXXXX)
PSCTL="$BUILD_DIR/client/psctl"
source scripts/lib/cluster.sh
if [ "$SCALES" -gt 0 ] && [ $MODE = ctr ]; then
  echo "chaos: --scales needs a dense job (jobs with sparse tables are not moved)" >&2
  exit 64
fi
echo "chaos: seed $SEED, $FAULTS faults, $SCALES server moves, $MODE job, logs in $RUN_DIR"

# The MLP job on Fashion-MNIST.
write_dense_job() {
  local DATA=${PS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  cat >"$RUN_DIR/job.json" <<JSON
{
  "name": "chaos",
  "model": {"kind": "MLP", "input_dim": 784, "num_classes": 10, "hidden_layers": [64]},
  "dataset": {
    "format": "IDX",
    "train_images": "$DATA/train-images-idx3-ubyte.gz",
    "train_labels": "$DATA/train-labels-idx1-ubyte.gz",
    "test_images": "$DATA/t10k-images-idx3-ubyte.gz",
    "test_labels": "$DATA/t10k-labels-idx1-ubyte.gz",
    "max_train_samples": $SAMPLES,
    "max_test_samples": 2000
  },
  "epochs": $EPOCHS, "batch_size": 32, "seed": 11,
  "optimizer": {"adam": {"learning_rate": 0.001}},
  "consistency": {"model": "BSP", "pipeline_parts": $PIPELINE_PARTS},
  "num_workers": 2, "num_servers": 2, "durability": "WAL"
}
JSON
}

# The CTR job: 26 tables of dim 8 cycling through the five sparse optimizers,
# with admission and eviction on some, on small generated data (low
# cardinalities: a few thousand ids, every optimizer's state snapshotted and
# replayed) in batches of 32, so that the faults land among many clocks.
write_ctr_job() {
  /usr/bin/python3 bench/criteo_gen.py --out "$RUN_DIR/data" --train_rows "$SAMPLES" \
    --test_rows 1000 --seed 5 --min_cardinality 5 --max_cardinality 2000 >/dev/null || return 1
  local optimizers=('{"rowwise_adagrad": {"learning_rate": 0.05}}'
    '{"adagrad": {"learning_rate": 0.05}}' '{"lazy_adam": {"learning_rate": 0.01}}'
    '{"ftrl": {"alpha": 0.05}}' '{"sgd": {"learning_rate": 0.05}}')
  local extras=('' ', "admission": {"min_count": 2}' ', "admission": {"probability": 0.5}'
    ', "eviction": {"max_rows_per_server": 40}' ', "eviction": {"max_idle_clocks": 60}')
  local tables="" f
  for f in $(seq 0 25); do
    tables+="${tables:+,}
      {\"name\": \"C$((f + 1))\", \"dim\": 8, \"optimizer\": ${optimizers[$((f % 5))]}${extras[$((f / 5 % 5))]}}"
  done
  cat >"$RUN_DIR/job.json" <<JSON
{
  "name": "chaos-ctr",
  "model": {
    "kind": "CTR", "input_dim": 13, "num_classes": 2,
    "sparse_tables": [$tables],
    "ctr": {"num_fields": 26, "bottom_mlp": [16, 8], "top_mlp": [16], "interaction": "DOT"}
  },
  "dataset": {"format": "CRITEO", "train_file": "$RUN_DIR/data/train.tsv",
              "test_file": "$RUN_DIR/data/test.tsv"},
  "epochs": $EPOCHS, "batch_size": 32, "seed": 11,
  "optimizer": {"adagrad": {"learning_rate": 0.02}},
  "consistency": {"model": "BSP"},
  "num_workers": 2, "num_servers": 2, "durability": "WAL"
}
JSON
}

if [ $MODE = ctr ]; then
  /usr/bin/python3 -c 'import numpy' 2>/dev/null ||
    { echo "chaos: skipped: --ctr needs /usr/bin/python3 with numpy"; rm -rf "$RUN_DIR"; exit 77; }
  write_ctr_job || { echo "chaos: bench/criteo_gen.py failed"; exit 1; }
else
  write_dense_job
fi

# Leases short enough that a killed worker is replaced within seconds.
CLUSTER_COORDINATOR_ARGS="--lease_ms=1500 --heartbeat_interval_ms=100 --recovery_grace_ms=60000"
CLUSTER_WORKER_ARGS=([0]="--ack_log=$RUN_DIR/acks.log" [1]="--ack_log=$RUN_DIR/acks.log")
# The CTR job logs 30 to 50 KB a clock per server: snapshots every MiB, so a
# restarted server restores buckets of rows from a snapshot, then replays the
# log after it; every snapshot's rows in a rows file of their own.
# shellcheck disable=SC2034  # read by cluster_start
[ $MODE = ctr ] && CLUSTER_SERVER_ARGS="--snapshot_log_mib=1 --snapshot_rows_file_kib=0"
[ "$SPARSE_MEMORY_BYTES" -gt 0 ] &&
  CLUSTER_SERVER_ARGS="${CLUSTER_SERVER_ARGS:-} --sparse_memory_bytes=$SPARSE_MEMORY_BYTES"
# A third server, free, for the moves (--scales): the job runs on two.
cluster_start "$BUILD_DIR" "$RUN_DIR" $((SCALES > 0 ? 3 : 2)) 2 >/dev/null || { echo "chaos: cluster did not start"; exit 1; }
trap 'cluster_stop >/dev/null 2>&1' EXIT

# A job's final progress as "clock total_clocks test_accuracy test_auc
# test_log_loss", the floats as the coordinator stored them (psctl get).
progress_of() {
  "$PSCTL" --coordinator="$COORDINATOR" get "$1" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
p = json.load(sys.stdin).get("progress", {})
print(*(p.get(k, d) for k, d in (("clock", -1), ("total_clocks", -1),
      ("test_accuracy", -1), ("test_auc", -1), ("test_log_loss", -1))))' ||
    echo "-1 -1 -1 -1 -1"
}

# 1. The uninterrupted run.
"$PSCTL" --coordinator="$COORDINATOR" submit "$RUN_DIR/job.json" --watch >"$RUN_DIR/baseline.out" 2>&1
baseline_job=$(sed -n 's/^submitted //p' "$RUN_DIR/baseline.out")
read -r _ _ baseline baseline_auc baseline_loss <<<"$(progress_of "$baseline_job")"
baseline_secs=$(sed -n 's/.*SUCCEEDED after \([0-9.]*\) s.*/\1/p' "$RUN_DIR/baseline.out")
if [ $MODE = ctr ]; then
  echo "chaos: uninterrupted run $baseline_job: test auc $baseline_auc logloss $baseline_loss in ${baseline_secs:-?} s"
else
  echo "chaos: uninterrupted run $baseline_job: accuracy $baseline in ${baseline_secs:-?} s"
fi
[ -n "$baseline_secs" ] && [ "$baseline" != -1 ] || { cat "$RUN_DIR/baseline.out"; exit 1; }

# 2. The same job under faults.
# A job that cannot recover must not hang the run: bound the watch.
limit=$(awk -v s="${baseline_secs:-10}" 'BEGIN {printf "%d", 10 * s + 180}')
timeout "$limit" "$PSCTL" --coordinator="$COORDINATOR" submit "$RUN_DIR/job.json" --watch >"$RUN_DIR/chaos.out" 2>&1 &
watch_pid=$!
for _ in $(seq 1 100); do grep -qs '^submitted ' "$RUN_DIR/chaos.out" && break; sleep 0.1; done
job=$(sed -n 's/^submitted //p' "$RUN_DIR/chaos.out")

# Largest acknowledged clock per worker of $job, as "c0 c1".
acked() {
  awk -v job="$job" '$1 == job && (!($2 in m) || $3 > m[$2]) { m[$2] = $3 }
    END { printf "%d %d\n", (0 in m) ? m[0] : -1, (1 in m) ? m[1] : -1 }' \
    "$RUN_DIR/acks.log" 2>/dev/null || echo "-1 -1"
}

# A server move of $job (psctl scale, answered once the proposal is
# durable): to 3 servers when the job is on 2 (as after a move a kill
# abandoned), else to 2. Tried again while refused (a move in progress, a
# vacant place, the third server not back yet, the coordinator restarting)
# for up to about 6 s. Sets scale_ok (1 when accepted).
scale_job() {
  local out try now target=3
  scale_ok=0
  for try in $(seq 1 30); do
    now=$(servers_of "$job")
    [ "$now" -gt 0 ] && target=$((now == 2 ? 3 : 2))
    # "already has": a move ended between the get and the scale; ask again.
    out=$(timeout 20 "$PSCTL" --coordinator="$COORDINATOR" scale "$job" --servers="$target" 2>&1) &&
      ! grep -q "already has" <<<"$out" && { scale_ok=1; break; }
    kill -0 "$watch_pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "chaos: move $moves_asked: scale to $target servers (try $try): $(echo "$out" | tail -n 1)"
}

# The number of servers of job $1's map in effect (0 if unknown).
servers_of() {
  "$PSCTL" --coordinator="$COORDINATOR" get "$1" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
print(len(json.load(sys.stdin).get("shard_map", {}).get("servers", [])))' 2>/dev/null || echo 0
}

victims=(server0 server1 worker0 worker1 coordinator)
# With moves, the third server too: it holds the job only between moves,
# so its reload is not checked (the final checks still are).
[ "$SCALES" -gt 0 ] && victims+=(server2)
injected=0 survived=0 lost=0
moves_asked=0 moves_accepted=0 kills_left=$FAULTS scales_left=$SCALES f=0
interval=$(awk -v s="${baseline_secs:-10}" -v n="$((FAULTS + SCALES))" 'BEGIN {printf "%.2f", s / (n + 1)}')
while [ $((kills_left + scales_left)) -gt 0 ]; do
  # A random moment within the next interval.
  sleep "$(awk -v i="$interval" -v r=$RANDOM 'BEGIN {printf "%.2f", i * (0.5 + r / 32767)}')"
  kill -0 "$watch_pid" 2>/dev/null || break  # The job already ended.
  # A kill or a move, at random among those left.
  if [ $scales_left -gt 0 ] && [ $((RANDOM % (kills_left + scales_left))) -lt $scales_left ]; then
    scales_left=$((scales_left - 1))
    moves_asked=$((moves_asked + 1))
    scale_job
    [ $scale_ok -eq 1 ] && moves_accepted=$((moves_accepted + 1))
    continue
  fi
  kills_left=$((kills_left - 1))
  f=$((f + 1))
  if [ ${#VICTIMS[@]} -gt 0 ]; then
    victim=${VICTIMS[$(((f - 1) % ${#VICTIMS[@]}))]}
  else
    victim=${victims[$((RANDOM % ${#victims[@]}))]}
  fi
  read -r a0 a1 <<<"$(acked)"
  reloads_before=$(grep -cE "job $job: (reloaded|took over)" "$RUN_DIR/$victim.log" 2>/dev/null)
  cluster_kill "$victim"
  injected=$((injected + 1))
  echo "chaos: fault $f: kill -9 $victim (acknowledged clocks: worker0 $a0, worker1 $a1)"
  sleep 0.3
  if ! cluster_restart "$victim" >/dev/null; then
    echo "chaos: $victim did not restart"
    continue
  fi
  case $victim in
    server2) ;;
    server*)
      # The restarted server reloads the job when the coordinator gives its
      # place back; its clocks must cover every acknowledged push.
      line=""
      for _ in $(seq 1 150); do
        # A server that restarts on a committed move it had not yet taken up
        # opens the job from its staged copy ("took over", with its clocks).
        line=$(grep -E "job $job: (reloaded|took over)" "$RUN_DIR/$victim.log" | sed -n "$((reloads_before + 1))p")
        [ -n "$line" ] && break
        kill -0 "$watch_pid" 2>/dev/null || break
        sleep 0.1
      done
      if [ -z "$line" ]; then
        echo "chaos:   $victim did not reload the job (it may have ended)"
      else
        read -r c0 c1 <<<"$(echo "$line" | sed 's/.*worker clocks \[\(.*\)\].*/\1/')"
        echo "chaos:   $victim $(echo "$line" | grep -o 'reloaded\|took over') worker clocks $c0 $c1$(echo "$line" |
          sed -n 's/.* and \([0-9]*\) sparse rows from the snapshot at update \([0-9]*\) and \([0-9]*\) logged.*/, \1 sparse rows (snapshot at update \2, \3 logged updates replayed)/p')"
        [ "$c0" -gt "$a0" ] || { lost=$((lost + a0 + 1 - c0)); echo "chaos:   LOST worker 0 updates"; }
        [ "$c1" -gt "$a1" ] || { lost=$((lost + a1 + 1 - c1)); echo "chaos:   LOST worker 1 updates"; }
        # Every clock admits rows: a server that reloads clocks but no rows
        # lost them.
        rows=$(echo "$line" | sed -n 's/.* and \([0-9]*\) sparse rows .*/\1/p')
        if [ $MODE = ctr ] && [ "$c0" -gt 0 ] && [ "${rows:-0}" -eq 0 ]; then
          lost=$((lost + c0)); echo "chaos:   LOST the sparse rows"
        fi
      fi
      ;;
  esac
  survived=$((survived + 1))
done
wait "$watch_pid"
watch_rc=$?
read -r clock total final final_auc final_loss <<<"$(progress_of "$job")"
state=$(grep -o 'job [a-z0-9-]* [A-Z]*' "$RUN_DIR/chaos.out" | tail -n 1 | awk '{print $3}')
finished=0
[ "$state" = SUCCEEDED ] && finished=1
# A fault counts as survived only if the job still finished.
[ $finished -eq 1 ] || survived=0

echo "chaos: faults injected:          $injected"
echo "chaos: faults survived:          $survived"
echo "chaos: acknowledged updates lost: $lost"
echo "chaos: jobs finished:            $finished of 1 (${state:-none})"
# Every clock of the job ran, and each worker's last push was acknowledged.
read -r a0 a1 <<<"$(acked)"
echo "chaos: final clock:              $clock of $total (last acknowledged: worker0 $a0, worker1 $a1)"
ok=1
if [ "$SCALES" -gt 0 ]; then
  # The moves that took effect (map_moves), and the job's servers at the end.
  read -r committed servers_at_end <<<"$("$PSCTL" --coordinator="$COORDINATOR" get "$job" 2>/dev/null |
    /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print(len(j.get("map_moves", [])), len(j.get("shard_map", {}).get("servers", [])))' || echo "-1 -1")"
  echo "chaos: server moves:             $moves_accepted of $moves_asked asked accepted, $committed committed; $servers_at_end servers at the end"
  # A move asked must have been accepted (a refusal lasted 6 s).
  [ "$moves_accepted" -eq "$moves_asked" ] || ok=0
fi
[ $watch_rc -eq 0 ] && [ $finished -eq 1 ] && [ $lost -eq 0 ] && [ "$survived" -eq "$injected" ] || ok=0
[ "$clock" = "$total" ] && [ "$a0" -eq $((total - 1)) ] && [ "$a1" -eq $((total - 1)) ] || ok=0
if [ $MODE = ctr ]; then
  echo "chaos: final test auc, logloss:  $final_auc $final_loss (uninterrupted: $baseline_auc $baseline_loss)"
  # Bit for bit: the rows the test set reads, and the dense tensors trained on
  # every row, are the uninterrupted run's. Unless a worker was killed between
  # its push reaching one server and the other: its replacement computes that
  # gradient again from values the first server has updated since (the worker
  # logs it), and the runs are close instead.
  if grep -qs "job $job: worker [0-9]*'s push of clock [0-9]* reached some servers only" "$RUN_DIR"/worker*.log; then
    echo "chaos: a worker's push reached one server only before it was killed: close, not equal"
    awk -v a="$final_auc" -v b="$baseline_auc" -v c="$final_loss" -v d="$baseline_loss" \
      'function abs(x) { return x < 0 ? -x : x }
       BEGIN { exit !(a >= 0 && c >= 0 && abs(a - b) <= 0.01 && abs(c - d) <= 0.01) }' || ok=0
  else
    [ "$final_auc" = "$baseline_auc" ] && [ "$final_loss" = "$baseline_loss" ] || ok=0
  fi
else
  echo "chaos: final accuracy:           $final (uninterrupted: $baseline)"
  awk -v a="$final" -v b="$baseline" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(a >= 0 && d <= 0.01)}' || ok=0
fi
if [ $ok -eq 1 ]; then
  echo "chaos: PASS"
  trap - EXIT
  cluster_stop >/dev/null 2>&1
  rm -rf "$RUN_DIR"
  exit 0
fi
echo "chaos: FAIL (logs in $RUN_DIR)"
tail -n 5 "$RUN_DIR/chaos.out"
exit 1

# shellcheck shell=bash
# Shared by the system tests that train on Fashion-MNIST with a local cluster
# (elastic_test.sh, scale_test.sh, rebuild_test.sh,
# server_sigterm_test.sh): source it after setting BUILD_DIR and SOURCE_DIR,
# then call system_test_begin. Needs bash. Sources scripts/lib/cluster.sh
# here, at the top level, so that its arrays stay global, and sets PSCTL
# (BUILD_DIR's psctl) and DATA_DIR (PS_FASHION_MNIST_DIR, default Debian's
# /usr/share/datasets/fashion-mnist).

# shellcheck source=scripts/lib/cluster.sh disable=SC1091
source "$SOURCE_DIR/scripts/lib/cluster.sh"
PSCTL=$BUILD_DIR/client/psctl
DATA_DIR=${PS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

# Exits 77 (skipped) unless DATA_DIR holds the four Fashion-MNIST files and
# python3 runs.
system_test_need_fashion_mnist() {
  local file
  for file in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
              t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    if [ ! -r "$DATA_DIR/$file" ]; then
      echo "1..0 # SKIP $DATA_DIR/$file is missing"
      exit 77
    fi
  done
  command -v python3 >/dev/null || { echo "1..0 # SKIP no python3"; exit 77; }
}

# Makes RUN_DIR (mktemp, named after PREFIX) and sets the EXIT trap: the cluster is stopped, and RUN_DIR removed on
# success (kept with PS_KEEP_RUN_DIR=1) or kept with every log's tail
# printed on failure. Defines ok (a passed TAP check) and fail (a failed
# one: the message, then the files named after it; exits 1). SEED, when
# set, is named in both failure lines.
system_test_begin() {
  RUN_DIR=$(mktemp -d -t "$1.XXXXXX")
  CHECKS=0
  SEED_NOTE=${SEED:+ (seed $SEED)}
  trap system_test_on_exit EXIT
}

system_test_on_exit() {
  local rc=$? log
  set +e
  [ "${#CLUSTER_PIDS[@]}" -gt 0 ] && cluster_stop >/dev/null 2>&1
  if [ "$rc" -eq 0 ] && [ "${PS_KEEP_RUN_DIR:-0}" != 1 ]; then
    rm -rf "$RUN_DIR"
    return
  fi
  if [ "$rc" -ne 0 ]; then
    for log in "$RUN_DIR"/*.log; do
      echo "----- $(basename "$log") (last 30 lines) -----"
      tail -n 30 "$log"
    done
  fi
  echo "# run directory kept: $RUN_DIR$SEED_NOTE"
}

ok() { CHECKS=$((CHECKS + 1)); echo "ok $CHECKS - $*"; }
fail() {
  echo "not ok $((CHECKS + 1)) - $1$SEED_NOTE"
  shift
  local f
  for f in "$@"; do cat "$f"; done
  exit 1
}

# Prints the job spec's "dataset" value: Fashion-MNIST from DATA_DIR, the
# first TRAIN training and TEST test samples.
system_test_dataset_json() {
  cat <<JSON
{
    "format": "IDX",
    "train_images": "$DATA_DIR/train-images-idx3-ubyte.gz",
    "train_labels": "$DATA_DIR/train-labels-idx1-ubyte.gz",
    "test_images": "$DATA_DIR/t10k-images-idx3-ubyte.gz",
    "test_labels": "$DATA_DIR/t10k-labels-idx1-ubyte.gz",
    "max_train_samples": $1,
    "max_test_samples": $2
  }
JSON
}

# Writes to FILE the spec of a BSP job that trains an MLP (784-64-10, ReLU,
# Adam at 0.001, seed 42) on Fashion-MNIST, from KEY=VALUE arguments:
# name (default "system"), samples and test (training and test samples,
# 1000 each), epochs (1), batch (32), durability (WAL), workers (2),
# servers (2); any other KEY=VALUE is a further field of the spec, VALUE
# written as it is (JSON), e.g. block_elems=8192 or min_workers=2.
system_test_mlp_job() {
  local file=$1 name=system samples=1000 test=1000 epochs=1 batch=32
  local durability=WAL workers=2 servers=2 extra="" arg
  shift
  for arg in "$@"; do
    case $arg in
      name=*) name=${arg#*=} ;;
      samples=*) samples=${arg#*=} ;;
      test=*) test=${arg#*=} ;;
      epochs=*) epochs=${arg#*=} ;;
      batch=*) batch=${arg#*=} ;;
      durability=*) durability=${arg#*=} ;;
      workers=*) workers=${arg#*=} ;;
      servers=*) servers=${arg#*=} ;;
      *=*) extra+="  \"${arg%%=*}\": ${arg#*=},"$'\n' ;;
      *) echo "system_test_mlp_job: $arg is not KEY=VALUE" >&2; return 1 ;;
    esac
  done
  cat >"$file" <<JSON
{
  "name": "$name",
  "model": { "kind": "MLP", "input_dim": 784, "num_classes": 10,
             "hidden_layers": [64], "activation": "RELU" },
  "dataset": $(system_test_dataset_json "$samples" "$test"),
  "epochs": $epochs,
  "batch_size": $batch,
  "seed": 42,
  "optimizer": { "adam": { "learning_rate": 0.001 } },
  "consistency": { "model": "BSP" },
  "durability": "$durability",
${extra}  "num_workers": $workers,
  "num_servers": $servers
}
JSON
}

# field EXPR: a Python expression over job $JOB's status `j` (psctl get,
# kept in RUN_DIR/get.json); prints nothing if psctl fails.
field() {
  timeout 30 "$PSCTL" --coordinator="$COORDINATOR" get "$JOB" >"$RUN_DIR/get.json" 2>/dev/null || { echo ""; return 0; }
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$RUN_DIR/get.json"
}
# Job $JOB's clock (its progress).
clock() { field 'int(j.get("progress", {}).get("clock", 0))'; }
# Job $JOB's test accuracy (its progress; empty before the first).
accuracy() { field 'j.get("progress", {}).get("test_accuracy", "")'; }
# Submits RUN_DIR/job.json and prints the new job's id (fails the test if
# psctl does).
submit() {
  "$PSCTL" --coordinator="$COORDINATOR" submit "$RUN_DIR/job.json" \
    >"$RUN_DIR/submit.out" 2>&1 || fail "submit" "$RUN_DIR/submit.out"
  sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' "$RUN_DIR/submit.out"
}

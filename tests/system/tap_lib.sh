# Shared by the system tests that train on Fashion-MNIST with a local cluster
# (elastic_test.sh, scale_test.sh): source it after setting SOURCE_DIR, then
# call system_test_begin. Needs bash. Sources scripts/lib/cluster.sh here, at
# the top level, so that its arrays stay global.

# shellcheck source=scripts/lib/cluster.sh disable=SC1091
source "$SOURCE_DIR/scripts/lib/cluster.sh"

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

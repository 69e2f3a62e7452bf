#!/usr/bin/env bash
# Runs a hyperparameter sweep on a local cluster (1 coordinator, 2 parameter
# servers, 2 workers, each its own process, as scripts/demo.sh starts them):
# submits the sweep with psctl, follows it, prints the trials table and the
# best trial, and shuts the cluster down.
#
#   scripts/sweep.sh [SWEEP.json]   (default: deploy/sweeps/fashion-mnist-mlp.json)
#
# SERVERS and WORKERS (default 2 each) set the cluster's size: a trial runs
# on the job's num_servers and num_workers, so a cluster of k times that runs
# k trials at once (up to the sweep's max_concurrent_trials).
set -euo pipefail
cd "$(dirname "$0")/.."
SWEEP=${1:-deploy/sweeps/fashion-mnist-mlp.json}
BUILD_DIR=${BUILD_DIR:-build}

if [[ -z "${SKIP_BUILD:-}" ]]; then
  bash scripts/setup.sh
  BUILD_DIR=$BUILD_DIR bash scripts/build.sh --target ps-coordinator ps-server ps-worker psctl
fi

RUN_DIR=$(mktemp -d -t ps-sweep.XXXXXX)
source scripts/lib/cluster.sh
trap 'cluster_stop || true; echo "logs and data: $RUN_DIR"' EXIT
echo "starting local cluster in $RUN_DIR"
cluster_start "$BUILD_DIR" "$RUN_DIR" "${SERVERS:-2}" "${WORKERS:-2}"
echo "coordinator at $COORDINATOR"

start=$(date +%s)
set +e
"$BUILD_DIR/client/psctl" --coordinator="$COORDINATOR" sweep submit "$SWEEP" --watch
rc=$?
set -e
echo "wall time: $(( $(date +%s) - start )) s"
exit $rc

#!/usr/bin/env bash
# The main job: installs what is needed, builds, starts a local cluster (1
# coordinator, 2 parameter servers, 2 workers, each its own process), trains an
# MLP on Fashion-MNIST through psctl with live progress, prints the test accuracy
# and shuts the cluster down.
#
#   scripts/demo.sh [JOB.json]     (default: deploy/jobs/fashion-mnist-mlp.json)
set -euo pipefail
cd "$(dirname "$0")/.."
JOB=${1:-deploy/jobs/fashion-mnist-mlp.json}
BUILD_DIR=${BUILD_DIR:-build}

bash scripts/setup.sh
BUILD_DIR=$BUILD_DIR bash scripts/build.sh --target ps-coordinator ps-server ps-worker psctl

RUN_DIR=$(mktemp -d -t ps-demo.XXXXXX)
source scripts/lib/cluster.sh
trap 'cluster_stop || true; echo "logs and data: $RUN_DIR"' EXIT
echo "starting local cluster in $RUN_DIR"
cluster_start "$BUILD_DIR" "$RUN_DIR" 2 2
echo "coordinator at $COORDINATOR; metrics ports:"
cluster_metrics_ports | sed 's/^/  /'

start=$(date +%s)
set +e
"$BUILD_DIR/client/psctl" --coordinator="$COORDINATOR" submit "$JOB" --watch
rc=$?
set -e
echo "wall time: $(( $(date +%s) - start )) s"
exit $rc

#!/usr/bin/env bash
# Every job spec that deploy/ ships (deploy/jobs/*.json and the Kubernetes
# ConfigMap's deploy/k8s/base/job.json) is a valid ps.v1.JobSpec: psctl
# validates a spec before it sends it, so against an address where nothing
# listens a valid spec fails with UNAVAILABLE and an invalid one with
# INVALID_ARGUMENT. The Kubernetes copy must also train what
# deploy/jobs/fashion-mnist-mlp.json trains.
#   bash tests/deploy/job_specs_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
PSCTL=$1/client/psctl
SOURCE_DIR=$(cd "$2" && pwd)
n=0
status=0
for spec in "$SOURCE_DIR"/deploy/jobs/*.json "$SOURCE_DIR"/deploy/k8s/base/job.json; do
  n=$((n + 1))
  rc=0
  out=$("$PSCTL" --coordinator=127.0.0.1:1 --timeout_ms=2000 --submit_retry_ms=0 submit "$spec" 2>&1) || rc=$?
  if [ "$rc" -eq 1 ] && [[ $out == *"(UNAVAILABLE)"* ]]; then
    echo "ok $n - ${spec#"$SOURCE_DIR"/} is a valid job spec"
  else
    echo "not ok $n - ${spec#"$SOURCE_DIR"/} is a valid job spec (psctl exit $rc: $out)"
    status=1
  fi
done
n=$((n + 1))
if cmp -s "$SOURCE_DIR/deploy/jobs/fashion-mnist-mlp.json" "$SOURCE_DIR/deploy/k8s/base/job.json"; then
  echo "ok $n - deploy/k8s/base/job.json is deploy/jobs/fashion-mnist-mlp.json"
else
  echo "not ok $n - deploy/k8s/base/job.json differs from deploy/jobs/fashion-mnist-mlp.json"
  status=1
fi
echo "1..$n"
exit $status

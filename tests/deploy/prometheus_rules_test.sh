#!/usr/bin/env bash
# deploy/prometheus with promtool: both scrape configurations (compose and
# Kubernetes), the alert rules, and their unit tests (alerts_test.yml).
#   bash tests/deploy/prometheus_rules_test.sh SOURCE_DIR
set -euo pipefail
DIR=$(cd "$1/deploy/prometheus" && pwd)
if ! command -v promtool >/dev/null; then
  echo "1..0 # SKIP promtool is not installed (scripts/setup.sh installs prometheus)"
  exit 77
fi
cd "$DIR"
n=0
for cmd in "check config prometheus.yml" "check config prometheus-kubernetes.yml" \
    "check rules alerts.yml" "test rules alerts_test.yml"; do
  n=$((n + 1))
  # shellcheck disable=SC2086  # the command is meant to split
  if out=$(promtool $cmd 2>&1); then
    echo "ok $n - promtool $cmd"
  else
    echo "not ok $n - promtool $cmd"
    printf '%s\n' "$out" | sed 's/^/#   /'
    exit 1
  fi
done
echo "1..$n"

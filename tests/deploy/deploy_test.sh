#!/usr/bin/env bash
# Static checks of deploy/ (no cluster, no container engine):
#   - the Kubernetes manifests against Kubernetes' published schemas, and the
#     references between them (validate.mjs k8s); when kubectl is installed,
#     `kubectl kustomize` of every kustomization too, which must build what
#     validate.mjs builds;
#   - deploy/docker-compose.yml against the Prometheus and Grafana configuration
#     (validate.mjs compose);
#   - the Grafana dashboard and the alert rules against the metric reference of
#     docs/operations.md (validate.mjs dashboard);
#   - that the schema validation catches errors (validate.mjs selftest);
#   - shellcheck of worker-job.sh and scripts/compose-e2e.sh, when installed.
# Installs the locked npm packages (package-lock.json) into tests/deploy/node_modules
# with `npm ci` when they are missing or the lock file changed.
#
#   bash tests/deploy/deploy_test.sh SOURCE_DIR
set -euo pipefail
SOURCE_DIR=$(cd "$1" && pwd)
HERE=$SOURCE_DIR/tests/deploy
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "1..0 # SKIP $tool is not installed (scripts/setup.sh installs it)"
    exit 77
  fi
done
bash "$HERE/npm_install.sh"

status=0
run() {
  echo "# node validate.mjs $1"
  node "$HERE/validate.mjs" "$@" || status=1
}
run selftest
rendered=()
# kubectl's kustomize, if it is v4 or later (older ones lack features used here).
kustomize_version=$(kubectl version --client -o json 2>/dev/null | node -e '
  let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
    try { console.log(JSON.parse(s).kustomizeVersion || ""); } catch { console.log(""); }
  });' || true)
if [[ $kustomize_version =~ ^v([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 4 ]; then
  echo "# kubectl kustomize $kustomize_version"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  while IFS= read -r dir; do
    out=$tmp/$(echo "$dir" | tr / _).yaml
    if kubectl kustomize "$SOURCE_DIR/$dir" >"$out" 2>"$out.err"; then
      rendered+=(--rendered "$dir=$out")
    else
      echo "not ok - kubectl kustomize $dir"
      sed 's/^/#   /' "$out.err"
      status=1
    fi
  done < <(cd "$SOURCE_DIR" && find deploy/k8s -name kustomization.yaml -printf '%h\n' | sort)
else
  echo "# no kubectl with kustomize v4 or later (found: ${kustomize_version:-none}): kustomizations are built by validate.mjs only"
fi
run k8s "$SOURCE_DIR" "${rendered[@]}"
run compose "$SOURCE_DIR"
run dashboard "$SOURCE_DIR"

sh -n "$SOURCE_DIR/deploy/k8s/base/worker-job.sh" || status=1
if command -v shellcheck >/dev/null; then
  if shellcheck -S warning -s sh "$SOURCE_DIR/deploy/k8s/base/worker-job.sh" &&
      shellcheck -S warning "$SOURCE_DIR/scripts/compose-e2e.sh" "$HERE"/*.sh; then
    echo "ok - shellcheck: worker-job.sh, compose-e2e.sh, tests/deploy/*.sh"
  else
    echo "not ok - shellcheck"
    status=1
  fi
fi
exit $status

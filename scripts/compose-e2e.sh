#!/usr/bin/env bash
# The docker-compose cluster end to end, with podman (no Docker engine needed):
#
#   1. installs podman, podman-compose, runc, netavark, aardvark-dns and
#      debootstrap (Debian packages) if missing;
#   2. makes the debian:bookworm base image with `debootstrap --variant=minbase
#      bookworm` from Debian's archive and `podman import` (kept for later runs);
#   3. builds the cluster image (deploy/Dockerfile) and the Prometheus image
#      (deploy/prometheus/Dockerfile);
#   4. brings deploy/docker-compose.yml up with podman-compose (Grafana too if
#      its image can be had: it is not packaged in Debian);
#   5. submits a short job (deploy/jobs/fashion-mnist-mlp-short.json) with the
#      documented `compose exec coordinator psctl submit ... --watch` and
#      checks that it SUCCEEDED;
#   6. checks through Prometheus's HTTP API that every target is up and that
#      the job's metrics arrived;
#   7. trains the demo job (deploy/jobs/fashion-mnist-mlp.json) while server0
#      is killed (SIGKILL) and started again: it comes back as server0:7100
#      with its volume, reloads its shards, and the job SUCCEEDS
#      (PS_E2E_SHORT=1 skips this step);
#   8. tears it all down (containers, network, volumes), also on failure.
#
#   sudo scripts/compose-e2e.sh        (needs root: rootful podman)
#
# Environment: JOBS (compile jobs, default 2), DEBIAN_MIRROR (default
# http://deb.debian.org/debian; a snapshot.debian.org URL pins every package),
# PS_E2E_REBUILD_BASE=1 (bootstrap the base image again), PS_E2E_KEEP=1 (leave
# the cluster up), PS_GRAFANA_IMAGE. Podman settings: deploy/podman/containers.conf.
# Takes 15 to 40 minutes the first time (the image compiles the project), a few
# minutes afterwards (layer cache). Not part of ctest: docs/operations.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SOURCE_DIR=$PWD

PROJECT=paramserver-e2e
COMPOSE_FILE=deploy/docker-compose.yml
BASE_IMAGE=localhost/debian:bookworm
export PS_IMAGE=localhost/paramserver:dev
export PS_PROMETHEUS_IMAGE=localhost/paramserver-prometheus:dev
export PS_GRAFANA_IMAGE=${PS_GRAFANA_IMAGE:-docker.io/grafana/grafana-oss:10.4.2}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOB_FILE=fashion-mnist-mlp-short.json
WATCH_LIMIT_S=900
export CONTAINERS_CONF=$SOURCE_DIR/deploy/podman/containers.conf
# Reproducible image metadata and layer timestamps: the commit's time.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH

START_S=$SECONDS
say() { printf 'compose-e2e: [%4ds] %s\n' $((SECONDS - START_S)) "$*"; }
die() { say "FAIL: $*"; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  echo "compose-e2e: run as root (rootful podman): sudo $0" >&2
  exit 1
fi

# --- 1. tools -------------------------------------------------------------------
packages=(podman podman-compose runc netavark aardvark-dns debootstrap curl jq)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
say "$(podman --version), $(runc --version | head -n 1), podman-compose $(dpkg-query -W -f='${Version}' podman-compose)"

compose() { podman-compose -p "$PROJECT" -f "$COMPOSE_FILE" "$@"; }
container() { echo "${PROJECT}_$1_1"; }

# --- 8. teardown, also on failure -------------------------------------------------
teardown() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ]; then
    for s in coordinator server0 server1 worker0 worker1 prometheus; do
      echo "----- logs of $s (last 30 lines) -----"
      podman logs --tail 30 "$(container "$s")" 2>&1
    done
  fi
  if [ "${PS_E2E_KEEP:-0}" = 1 ]; then
    say "PS_E2E_KEEP=1: the cluster stays up (down: podman-compose -p $PROJECT -f $COMPOSE_FILE down -v)"
    return
  fi
  say "tearing down: containers, network, volumes"
  compose down -v -t 20 >/dev/null 2>&1
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1
  local left
  left=$(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" -q | wc -l)
  left=$((left + $(podman volume ls -q | grep -c "^${PROJECT}_" || true)))
  say "teardown done ($left containers or volumes left)"
  if [ "$rc" -eq 0 ]; then say "PASS in $((SECONDS - START_S)) s"; else say "FAILED (exit $rc)"; fi
}
trap teardown EXIT

# --- 2. base image -----------------------------------------------------------------
if [ "${PS_E2E_REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$BASE_IMAGE"; then
  rootfs=$(mktemp -d /var/tmp/ps-rootfs.XXXXXX)
  say "debootstrap --variant=minbase bookworm from $DEBIAN_MIRROR"
  t0=$SECONDS
  debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 ||
    { tail -n 20 "$rootfs.log"; die "debootstrap failed"; }
  # The image's apt sources: the release, its updates and security updates.
  security=${DEBIAN_SECURITY_MIRROR:-${DEBIAN_MIRROR%/debian}/debian-security}
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $DEBIAN_MIRROR bookworm main
deb $DEBIAN_MIRROR bookworm-updates main
deb $security bookworm-security main
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/log/* "$rootfs"/var/cache/ldconfig/aux-cache
  tar -C "$rootfs" --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime -c . |
    podman import --quiet --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs" "$rootfs.log"
  say "base image $BASE_IMAGE made in $((SECONDS - t0)) s"
else
  say "base image $BASE_IMAGE exists (PS_E2E_REBUILD_BASE=1 makes it again)"
fi

# --- 3. images ----------------------------------------------------------------------
say "building $PS_IMAGE (deploy/Dockerfile, JOBS=${JOBS:-2})"
t0=$SECONDS
podman build --pull=never --layers \
  -f deploy/Dockerfile --ignorefile deploy/Dockerfile.dockerignore \
  --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg JOBS="${JOBS:-2}" \
  --build-arg SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
  --timestamp "$SOURCE_DATE_EPOCH" -t "$PS_IMAGE" . >/var/tmp/ps-compose-e2e-build.log 2>&1 ||
  { tail -n 40 /var/tmp/ps-compose-e2e-build.log; die "image build failed (log: /var/tmp/ps-compose-e2e-build.log)"; }
BUILD_S=$((SECONDS - t0))
say "built $PS_IMAGE in $BUILD_S s: $(podman image inspect --format '{{.Id}} {{.Size}}' "$PS_IMAGE" | awk '{printf "%.12s, %.0f MB", $1, $2/1e6}')"
podman run --rm "$PS_IMAGE" sh -c 'id; ls /usr/local/bin' | tr '\n' ' ' | sed 's/^/compose-e2e:   image: /; s/$/\n/'
t0=$SECONDS
podman build --pull=never --layers --build-arg BASE_IMAGE="$BASE_IMAGE" \
  --build-arg SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" --timestamp "$SOURCE_DATE_EPOCH" -t "$PS_PROMETHEUS_IMAGE" deploy/prometheus \
  >/var/tmp/ps-compose-e2e-prometheus.log 2>&1 ||
  { tail -n 20 /var/tmp/ps-compose-e2e-prometheus.log; die "Prometheus image build failed"; }
say "built $PS_PROMETHEUS_IMAGE in $((SECONDS - t0)) s"

# Grafana is not packaged in Debian: its image comes from a registry.
services=(coordinator server0 server1 worker0 worker1 prometheus)
if podman image exists "$PS_GRAFANA_IMAGE" ||
    timeout 120 podman pull -q "$PS_GRAFANA_IMAGE" >/tmp/ps-grafana-pull.log 2>&1; then
  services+=(grafana)
else
  say "WITHOUT GRAFANA: $PS_GRAFANA_IMAGE cannot be pulled here: $(tail -n 1 /tmp/ps-grafana-pull.log | cut -c1-200)"
fi

# --- 4. up ----------------------------------------------------------------------------
compose down -v -t 5 >/dev/null 2>&1 || true   # leftovers of an interrupted run
say "podman-compose up -d ${services[*]}"
t0=$SECONDS
compose up -d --no-build "${services[@]}" >/var/tmp/ps-compose-e2e-up.log 2>&1 ||
  { cat /var/tmp/ps-compose-e2e-up.log; die "podman-compose up failed"; }
declare -A grpc_port=([coordinator]=7000 [server0]=7100 [server1]=7100 [worker0]=7200 [worker1]=7200)
for s in coordinator server0 server1 worker0 worker1; do
  for _ in $(seq 1 120); do
    podman exec "$(container "$s")" psctl health "127.0.0.1:${grpc_port[$s]}" >/dev/null 2>&1 && break
    sleep 0.5
  done
  podman exec "$(container "$s")" psctl health "127.0.0.1:${grpc_port[$s]}" >/dev/null 2>&1 ||
    die "$s does not serve gRPC health on ${grpc_port[$s]}"
done
say "every process is SERVING (gRPC health) $((SECONDS - t0)) s after up:"
podman ps --filter "label=io.podman.compose.project=$PROJECT" --format '  {{.Names}}  {{.Status}}  {{.Ports}}'
# The compose healthchecks themselves (podman runs them on systemd timers,
# which this machine lacks: run each once by hand).
for s in coordinator server0 server1 worker0 worker1; do
  podman healthcheck run "$(container "$s")" >/dev/null || die "the healthcheck of $s fails"
done
say "the compose healthchecks (psctl health) pass: $(podman ps --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}={{.Status}}' | grep -v _prometheus_ | sed "s/${PROJECT}_//g; s/_1=/=/g; s/Up [^(]*//g" | tr '\n' ' ')"
# Both servers and both workers registered (the coordinator counts live nodes).
for _ in $(seq 1 60); do
  nodes=$(curl -s "http://127.0.0.1:9090/api/v1/query?query=ps_nodes" | jq -r '[.data.result[]? | .value[1] | tonumber] | add // 0' 2>/dev/null || echo 0)
  [ "$nodes" = 4 ] && break
  sleep 1
done
say "the coordinator counts $nodes live servers and workers (ps_nodes)"

# --- 5. a short job, submitted the documented way ---------------------------------------
say "submitting: podman-compose exec -T coordinator psctl submit /etc/ps/jobs/$JOB_FILE --watch"
t0=$SECONDS
timeout "$WATCH_LIMIT_S" podman-compose -p "$PROJECT" -f "$COMPOSE_FILE" exec -T coordinator \
  psctl submit "/etc/ps/jobs/$JOB_FILE" --watch 2>&1 | tee /var/tmp/ps-compose-e2e-job.log | sed 's/^/  /'
JOB_ID=$(sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' /var/tmp/ps-compose-e2e-job.log)
[ -n "$JOB_ID" ] || die "the job was not submitted"
STATE=$(podman exec "$(container coordinator)" psctl get "$JOB_ID" | jq -r .state)
ACCURACY=$(podman exec "$(container coordinator)" psctl get "$JOB_ID" | jq -r .progress.test_accuracy)
[ "$STATE" = SUCCEEDED ] || die "job $JOB_ID ended $STATE"
say "job $JOB_ID SUCCEEDED in $((SECONDS - t0)) s, test accuracy $ACCURACY"
if [ -x build/client/psctl ]; then
  say "from the host, through the published port: build/client/psctl --coordinator=127.0.0.1:7000 list"
  build/client/psctl --coordinator=127.0.0.1:7000 list | sed 's/^/  /'
fi

# --- 6. Prometheus -------------------------------------------------------------------------
expected_targets=6   # 5 processes and Prometheus itself
for _ in $(seq 1 60); do
  targets=$(curl -s http://127.0.0.1:9090/api/v1/targets)
  up=$(jq '[.data.activeTargets[] | select(.health == "up")] | length' <<<"$targets")
  [ "$up" = "$expected_targets" ] && break
  sleep 1
done
say "Prometheus targets (GET /api/v1/targets):"
jq -r '.data.activeTargets[] | "  \(.labels.job)\t\(.labels.instance)\t\(.health)\t\(.lastError)"' <<<"$targets" | column -t -s $'\t'
[ "$up" = "$expected_targets" ] || die "$up of $expected_targets Prometheus targets are up"
say "$up of $expected_targets Prometheus targets are up"
# The job's metrics arrived (5 s scrapes; wait for the last one).
sleep 6
query() {
  curl -s --get http://127.0.0.1:9090/api/v1/query --data-urlencode "query=$1" |
    jq -r '.data.result[] | "\(.metric | del(.__name__) | to_entries | map("\(.key)=\(.value)") | join(",")) \(.value[1])"'
}
for q in 'ps_jobs{state="SUCCEEDED"}' 'max(ps_worker_test_accuracy_ratio)' 'sum(ps_worker_steps_total)' \
    'sum by (instance) (ps_updates_applied_total)' 'sum by (instance) (ps_store_written_bytes_total)' \
    'ALERTS'; do
  echo "  $q:"
  result=$(query "$q")
  printf '%s\n' "${result:-(none)}" | sed 's/^/    /'
done
[ "$(query 'ps_jobs{state="SUCCEEDED"}' | awk '{print $2}')" -ge 1 ] || die "Prometheus has no SUCCEEDED job"

# --- 7. a server crash during training ------------------------------------------------
if [ "${PS_E2E_SHORT:-0}" != 1 ]; then
  say "submitting the demo job: podman-compose exec -T coordinator psctl submit /etc/ps/jobs/fashion-mnist-mlp.json"
  out=$(podman-compose -p "$PROJECT" -f "$COMPOSE_FILE" exec -T coordinator \
    psctl submit /etc/ps/jobs/fashion-mnist-mlp.json 2>/dev/null)
  DEMO_ID=$(sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' <<<"$out")
  [ -n "$DEMO_ID" ] || die "the demo job was not submitted: $out"
  for _ in $(seq 1 600); do
    clock=$(podman exec "$(container coordinator)" psctl get "$DEMO_ID" | jq -r '.progress.clock // 0')
    [ "${clock:-0}" -ge 500 ] && break
    sleep 0.2
  done
  say "$DEMO_ID is RUNNING at clock $clock: kill -9 server0"
  podman kill -s KILL "$(container server0)" >/dev/null
  sleep 2
  podman start "$(container server0)" >/dev/null 2>&1 || true   # unless restart: unless-stopped did
  for _ in $(seq 1 60); do
    podman exec "$(container server0)" psctl health 127.0.0.1:7100 >/dev/null 2>&1 && break
    sleep 0.5
  done
  reloaded=
  for _ in $(seq 1 60); do
    reloaded=$(podman logs "$(container server0)" 2>&1 | grep -m 1 -o 'reloaded .*' || true)
    [ -n "$reloaded" ] && break
    sleep 0.5
  done
  [ -n "$reloaded" ] || die "server0 did not reload its shards after the restart"
  say "server0 is back as server0:7100 with its volume: $reloaded"
  timeout "$WATCH_LIMIT_S" podman exec "$(container coordinator)" psctl watch "$DEMO_ID" \
    >/var/tmp/ps-compose-e2e-demo.log 2>&1 || true
  tail -n 2 /var/tmp/ps-compose-e2e-demo.log | sed 's/^/  /'
  DEMO=$(podman exec "$(container coordinator)" psctl get "$DEMO_ID" | jq -r '"\(.state) \(.progress.test_accuracy)"')
  [ "${DEMO%% *}" = SUCCEEDED ] || die "$DEMO_ID ended ${DEMO%% *} after the server crash"
  say "$DEMO_ID (15 epochs, 60,000 samples) SUCCEEDED after the server crash, test accuracy ${DEMO#* }"
  query 'sum by (instance) (ps_pushes_duplicate_total)' | sed 's/^/  duplicate pushes (retried, not applied twice): /'
fi

if [[ " ${services[*]} " == *" grafana "* ]]; then
  for _ in $(seq 1 60); do curl -sf http://127.0.0.1:3000/api/health >/dev/null && break; sleep 1; done
  title=$(curl -s -u admin:admin http://127.0.0.1:3000/api/dashboards/uid/paramserver | jq -r .dashboard.title)
  [ "$title" = "Parameter server" ] || die "Grafana has no provisioned dashboard (got $title)"
  say "Grafana serves the provisioned dashboard \"$title\""
fi
say "image build ${BUILD_S} s; job $JOB_ID SUCCEEDED (accuracy $ACCURACY); $up/$expected_targets targets up${DEMO_ID:+; $DEMO_ID ${DEMO%% *} through a server crash}"

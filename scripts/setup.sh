#!/usr/bin/env bash
# Installs every Debian package the project needs to build, test and run.
# Safe to run repeatedly; needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev prometheus-cpp-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  dataset-fashion-mnist prometheus curl procps
  # tests/system/multihost_test.sh: network namespaces, veth and a bridge.
  iproute2
  libssl-dev openssl
  # The fuzz targets (tests/fuzz): clang with libFuzzer and the sanitizers.
  clang libclang-rt-14-dev
  # tests/lint/thread_safety.sh: reads compile_commands.json (clang
  # -Wthread-safety runs over every source it lists).
  jq
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Node.js and npm: tests/deploy validates the Kubernetes manifests against the
# published schemas (npm package kubernetes-models, installed by `npm ci` when
# the test runs). They are checked as commands, not packages: a machine may have
# them from elsewhere (NodeSource's nodejs bundles npm and conflicts with
# Debian's npm package). PS_SETUP_NODE=0 leaves them out (the image's build
# stage, deploy/Dockerfile, runs no tests).
if [ "${PS_SETUP_NODE:-1}" != 0 ] && ! { command -v node && command -v npm; } >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"

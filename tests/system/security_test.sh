#!/usr/bin/env bash
# The real executables under mutual TLS, a cluster secret and a job token
# (docs/security.md): the cluster trains a job for a client with the token;
# a plaintext client, a client without the token, a member without a
# certificate and a process without the secret are refused; a bad security
# file stops a process at start with a message naming it.
#   security_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
BUILD_DIR=$(cd "$1" && pwd)
cd "$2"
PSCTL="$BUILD_DIR/client/psctl"
DATA=${PS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
command -v openssl >/dev/null || { echo "skipped: no openssl"; exit 77; }
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || { echo "skipped: no Fashion-MNIST"; exit 77; }
RUN_DIR=$(mktemp -d -t ps-security.XXXXXX)
source scripts/lib/cluster.sh
CLUSTER_BUILD_DIR=$BUILD_DIR
CLUSTER_RUN_DIR=$RUN_DIR
trap 'cluster_stop >/dev/null 2>&1; rm -rf "$RUN_DIR"' EXIT
failures=0
ok() { echo "ok - $1"; }
not_ok() { echo "not ok - $1"; failures=$((failures + 1)); }

# Certificates: the cluster's CA and a node certificate; another CA and an
# intruder's certificate.
(
  cd "$RUN_DIR" || exit 1
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' >leaf.ext
  ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  for ca in ca other-ca; do
    openssl req -x509 $ec -days 2 -subj "/CN=$ca" -keyout $ca.key -out $ca.pem
  done
  for pair in node:ca intruder:other-ca; do
    name=${pair%%:*} issuer=${pair#*:}
    openssl req $ec -subj "/CN=$name" -keyout $name.key -out $name.csr &&
      openssl x509 -req -days 2 -in $name.csr -CA $issuer.pem -CAkey $issuer.key \
        -CAcreateserial -extfile leaf.ext -out $name.pem
  done
) >"$RUN_DIR/openssl.log" 2>&1 || { cat "$RUN_DIR/openssl.log"; exit 1; }
echo "security-test-secret-0123456789" >"$RUN_DIR/secret"
echo "security-test-token-0123456789" >"$RUN_DIR/token"
chmod 600 "$RUN_DIR"/secret "$RUN_DIR"/token "$RUN_DIR"/*.key
TLS=(--tls_cert="$RUN_DIR/node.pem" --tls_key="$RUN_DIR/node.key"
     --tls_ca="$RUN_DIR/ca.pem" --cluster_secret_file="$RUN_DIR/secret")

cluster_spawn coordinator "$BUILD_DIR/coordinator/ps-coordinator" \
  --listen=127.0.0.1:0 --data_dir="$RUN_DIR/coordinator.data" --metrics_port=-1 \
  --heartbeat_interval_ms=200 "${TLS[@]}" --auth_token_file="$RUN_DIR/token" ||
  { cat "$RUN_DIR/coordinator.log"; exit 1; }
COORDINATOR="127.0.0.1:$(cluster_port "$RUN_DIR/coordinator.ports" grpc_port)"
cluster_spawn server0 "$BUILD_DIR/server/ps-server" --coordinator="$COORDINATOR" \
  --data_dir="$RUN_DIR/server0.data" --metrics_port=-1 "${TLS[@]}" \
  --tls_require_client_cert || { cat "$RUN_DIR/server0.log"; exit 1; }
SERVER="127.0.0.1:$(cluster_port "$RUN_DIR/server0.ports" grpc_port)"
cluster_spawn worker0 "$BUILD_DIR/worker/ps-worker" --coordinator="$COORDINATOR" \
  --device=cpu --compute_threads=1 --metrics_port=-1 "${TLS[@]}" \
  --tls_require_client_cert || { cat "$RUN_DIR/worker0.log"; exit 1; }

# Runs psctl: NAME EXPECTED_EXIT EXPECTED_OUTPUT ARGS...
expect_psctl() {
  local name=$1 want_rc=$2 want=$3 out rc
  shift 3
  out=$(timeout 120 "$PSCTL" --coordinator="$COORDINATOR" --timeout_ms=5000 "$@" 2>&1)
  rc=$?
  if [ $rc -eq "$want_rc" ] && grep -q -- "$want" <<<"$out"; then
    ok "$name: exit $rc, \"$(grep -m1 -o -- "$want.*" <<<"$out" | cut -c1-90)\""
  else
    not_ok "$name: exit $rc (want $want_rc and \"$want\"): $(tail -n 3 <<<"$out")"
  fi
}

cat >"$RUN_DIR/job.json" <<JSON
{
  "name": "secure",
  "model": {"kind": "MLP", "input_dim": 784, "num_classes": 10, "hidden_layers": [32]},
  "dataset": {
    "format": "IDX",
    "train_images": "$DATA/train-images-idx3-ubyte.gz",
    "train_labels": "$DATA/train-labels-idx1-ubyte.gz",
    "test_images": "$DATA/t10k-images-idx3-ubyte.gz",
    "test_labels": "$DATA/t10k-labels-idx1-ubyte.gz",
    "max_train_samples": 2000, "max_test_samples": 500
  },
  "epochs": 1, "batch_size": 32, "seed": 5,
  "optimizer": {"adam": {"learning_rate": 0.002}},
  "num_workers": 1, "num_servers": 1, "non_finite_gradients": "NON_FINITE_DROP"
}
JSON

expect_psctl "plaintext client to the TLS coordinator" 1 "UNAVAILABLE" \
  --token_file="$RUN_DIR/token" list
expect_psctl "client that trusts another CA" 1 "UNAVAILABLE" \
  --tls_ca="$RUN_DIR/other-ca.pem" --token_file="$RUN_DIR/token" list
expect_psctl "submit without a token" 1 "UNAUTHENTICATED" \
  --tls_ca="$RUN_DIR/ca.pem" submit "$RUN_DIR/job.json"
expect_psctl "list with a wrong token" 1 "UNAUTHENTICATED" \
  --tls_ca="$RUN_DIR/ca.pem" --token=not-the-token-0123456789 list
expect_psctl "submit with the token trains the job" 0 "SUCCEEDED" \
  --tls_ca="$RUN_DIR/ca.pem" --token_file="$RUN_DIR/token" submit "$RUN_DIR/job.json" --watch
expect_psctl "export with the token" 0 "wrote job-000001" \
  --tls_ca="$RUN_DIR/ca.pem" --token_file="$RUN_DIR/token" export job-000001 \
  --output="$RUN_DIR/model.bin"
expect_psctl "health of the mTLS server with the node certificate" 0 "SERVING" \
  --tls_ca="$RUN_DIR/ca.pem" --tls_cert="$RUN_DIR/node.pem" \
  --tls_key="$RUN_DIR/node.key" health "$SERVER"
expect_psctl "health of the mTLS server without a certificate" 1 "UNAVAILABLE" \
  --tls_ca="$RUN_DIR/ca.pem" health "$SERVER"
expect_psctl "health of the mTLS server with the intruder's certificate" 1 "UNAVAILABLE" \
  --tls_ca="$RUN_DIR/ca.pem" --tls_cert="$RUN_DIR/intruder.pem" \
  --tls_key="$RUN_DIR/intruder.key" health "$SERVER"

# A worker with the certificate but without the secret cannot join.
cluster_spawn outsider "$BUILD_DIR/worker/ps-worker" --coordinator="$COORDINATOR" \
  --device=cpu --metrics_port=-1 --tls_cert="$RUN_DIR/node.pem" \
  --tls_key="$RUN_DIR/node.key" --tls_ca="$RUN_DIR/ca.pem" >/dev/null
for _ in $(seq 1 50); do
  grep -q "UNAUTHENTICATED\|cluster secret" "$RUN_DIR/outsider.log" && break
  sleep 0.1
done
if grep -q "register with coordinator .* failed: x-ps-cluster-secret" "$RUN_DIR/outsider.log" &&
   ! grep -q "registered with coordinator" "$RUN_DIR/outsider.log"; then
  ok "a worker without the cluster secret is refused: $(grep -m1 -o 'x-ps-cluster-secret.*' "$RUN_DIR/outsider.log")"
else
  not_ok "a worker without the secret: $(tail -n 3 "$RUN_DIR/outsider.log")"
fi
for f in "$RUN_DIR"/*.log; do
  if grep -q "security-test-secret\|security-test-token" "$f"; then
    not_ok "$(basename "$f") shows a secret"
  fi
done
ok "no log shows the secret or the token"

# Bad security files stop a process at start, naming the file.
expect_start_refusal() {
  local name=$1 want=$2 out rc
  shift 2
  out=$(timeout 10 "$@" --metrics_port=-1 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "$want" <<<"$out"; then
    ok "$name: exit $rc, \"$(grep -m1 -o -- "$want.*" <<<"$out" | cut -c1-90)\""
  else
    not_ok "$name: exit $rc, output: $out"
  fi
}
echo short >"$RUN_DIR/weak"
expect_start_refusal "a weak cluster secret" "secret file $RUN_DIR/weak: shorter than 16" \
  "$BUILD_DIR/server/ps-server" --coordinator=127.0.0.1:1 --cluster_secret_file="$RUN_DIR/weak"
expect_start_refusal "a key that is not the certificate's" "is not the key of cert_file" \
  "$BUILD_DIR/coordinator/ps-coordinator" --listen=127.0.0.1:0 --data_dir="$RUN_DIR/c2" \
  --tls_cert="$RUN_DIR/node.pem" --tls_key="$RUN_DIR/intruder.key" --tls_ca="$RUN_DIR/ca.pem"
expect_start_refusal "a certificate without a CA" "ca_file is required" \
  "$BUILD_DIR/worker/ps-worker" --coordinator=127.0.0.1:1 \
  --tls_cert="$RUN_DIR/node.pem" --tls_key="$RUN_DIR/node.key"

cluster_stop >/dev/null 2>&1 || not_ok "a process did not stop cleanly"
trap 'rm -rf "$RUN_DIR"' EXIT
if [ $failures -gt 0 ]; then
  echo "$failures failures; logs:"
  tail -n 20 "$RUN_DIR"/*.log
  exit 1
fi
echo "all passed"

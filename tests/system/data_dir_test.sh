#!/usr/bin/env bash
# A damaged or foreign data directory gives a clear error at start and a
# non-zero exit, and nothing in it is modified (docs/durability.md).
#   data_dir_test.sh BUILD_DIR
set -uo pipefail
BUILD_DIR=$1
SERVER="$BUILD_DIR/server/ps-server"
COORDINATOR="$BUILD_DIR/coordinator/ps-coordinator"
DIR=$(mktemp -d -t ps-datadir.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
failures=0

# Snapshot of a directory's data files and contents. RocksDB's informational
# LOG file is rotated by any open attempt and holds no data, so it is left out.
digest() {
  (cd "$1" && find . -type f ! -name 'LOG*' -print0 | sort -z | xargs -0 sha256sum)
}

# Runs a daemon that must refuse to start: NAME EXPECTED_MESSAGE CMD...
expect_refusal() {
  local name=$1 expected=$2
  shift 2
  local out rc
  out=$(timeout 10 "$@" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "$expected" <<<"$out"; then
    echo "ok - $name: exit $rc, \"$(grep -m1 -o -- "$expected.*" <<<"$out" | cut -c1-100)\""
  else
    echo "not ok - $name: exit $rc, output: $out"
    failures=$((failures + 1))
  fi
}

# Makes a real database of each kind: start the daemon, stop it with SIGTERM.
make_db() {
  "$@" --metrics_port=-1 >/dev/null 2>&1 &
  local pid=$!
  sleep 1
  kill -TERM $pid
  wait $pid
}
make_db "$COORDINATOR" --listen=127.0.0.1:0 --data_dir="$DIR/coordinator"
make_db "$SERVER" --coordinator=127.0.0.1:1 --data_dir="$DIR/server"

touch "$DIR/afile"
expect_refusal "server on a regular file" "afile: the path exists and is not a directory" \
  "$SERVER" --coordinator=127.0.0.1:1 --metrics_port=-1 --data_dir="$DIR/afile"
expect_refusal "coordinator on a regular file" "afile: the path exists and is not a directory" \
  "$COORDINATOR" --listen=127.0.0.1:0 --metrics_port=-1 --data_dir="$DIR/afile"

before=$(digest "$DIR/coordinator")
expect_refusal "server on the coordinator's database" "not a parameter-server shard store" \
  "$SERVER" --coordinator=127.0.0.1:1 --metrics_port=-1 --data_dir="$DIR/coordinator"
[ "$(digest "$DIR/coordinator")" = "$before" ] && echo "ok - the coordinator's database is unchanged" ||
  { echo "not ok - the coordinator's database was modified"; diff <(echo "$before") <(digest "$DIR/coordinator"); failures=$((failures + 1)); }

before=$(digest "$DIR/server")
expect_refusal "coordinator on a server's database" "job table at $DIR/server" \
  "$COORDINATOR" --listen=127.0.0.1:0 --metrics_port=-1 --data_dir="$DIR/server"
[ "$(digest "$DIR/server")" = "$before" ] && echo "ok - the server's database is unchanged" ||
  { echo "not ok - the server's database was modified"; failures=$((failures + 1)); }

# A format version this build does not read (a newer build's directory).
for kind in server coordinator; do
  record=$(cat "$DIR/$kind/PS_FORMAT")
  echo "${record% *} 99" >"$DIR/$kind/PS_FORMAT"
  before=$(digest "$DIR/$kind")
  if [ $kind = server ]; then
    cmd=("$SERVER" --coordinator=127.0.0.1:1 --metrics_port=-1 --data_dir="$DIR/server")
  else
    cmd=("$COORDINATOR" --listen=127.0.0.1:0 --metrics_port=-1 --data_dir="$DIR/coordinator")
  fi
  expect_refusal "$kind on a later format version" \
    "has format version 99; this build reads versions 1 to 2" "${cmd[@]}"
  [ "$(digest "$DIR/$kind")" = "$before" ] && echo "ok - the $kind's later-version directory is unchanged" ||
    { echo "not ok - the $kind's later-version directory was modified"; failures=$((failures + 1)); }
  echo "$record" >"$DIR/$kind/PS_FORMAT"
done

echo garbage >"$DIR/server/CURRENT"
before=$(digest "$DIR/server")
expect_refusal "server on a corrupted database" "DATA_LOSS" \
  "$SERVER" --coordinator=127.0.0.1:1 --metrics_port=-1 --data_dir="$DIR/server"
[ "$(digest "$DIR/server")" = "$before" ] && echo "ok - the corrupted database is unchanged" ||
  { echo "not ok - the corrupted database was modified"; failures=$((failures + 1)); }

if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$DIR/locked" && chmod 000 "$DIR/locked"
  expect_refusal "server on an unreadable directory" "not readable" \
    "$SERVER" --coordinator=127.0.0.1:1 --metrics_port=-1 --data_dir="$DIR/locked"
  chmod 700 "$DIR/locked"
fi

[ $failures -eq 0 ] && echo "data_dir_test: all passed" || echo "data_dir_test: $failures failed"
exit $((failures > 0))

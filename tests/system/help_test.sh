#!/usr/bin/env bash
# Every executable's --help lists its own flags with their defaults (Abseil's
# default matched none of ours and printed "No flags matched"), and
# --helpshort does the same.
#   help_test.sh BUILD_DIR
set -uo pipefail
BUILD_DIR=$1
failures=0

# NAME BINARY FLAG... : --help and --helpshort list each FLAG, each with a
# "default:", and never say "No flags matched".
expect_flags() {
  local name=$1 binary=$2
  shift 2
  local mode out
  for mode in --help --helpshort; do
    out=$(timeout 10 "$binary" "$mode" 2>&1)
    if grep -q "No flags matched" <<<"$out"; then
      echo "not ok - $name $mode: \"No flags matched\""
      failures=$((failures + 1))
      continue
    fi
    local flag missing=""
    for flag in "$@"; do
      # Abseil prints "    --flag (help); default: value;" for each flag,
      # the help text possibly wrapped onto further lines.
      if ! grep -Pzq -- "(?s)\n    --$flag \(.*?\);\s+default: " <<<"$out"; then
        missing="$missing $flag"
      fi
    done
    if [ -n "$missing" ]; then
      echo "not ok - $name $mode: missing flags:$missing; output: $(head -c 600 <<<"$out")"
      failures=$((failures + 1))
    else
      echo "ok - $name $mode lists $# flags with defaults"
    fi
  done
}

expect_flags ps-coordinator "$BUILD_DIR/coordinator/ps-coordinator" \
  listen data_dir metrics_port max_model_bytes max_jobs reflection
expect_flags ps-server "$BUILD_DIR/server/ps-server" \
  listen coordinator data_dir metrics_port reflection
expect_flags ps-worker "$BUILD_DIR/worker/ps-worker" \
  coordinator device compute_threads reflection
expect_flags psctl "$BUILD_DIR/client/psctl" coordinator timeout_ms output

# A default is shown as the value it is.
out=$(timeout 10 "$BUILD_DIR/coordinator/ps-coordinator" --help 2>&1)
if grep -Pzq -- '(?s)\n    --listen \(.*?\);\s+default: "127\.0\.0\.1:7000"' <<<"$out"; then
  echo "ok - ps-coordinator --listen shows its default"
else
  echo "not ok - ps-coordinator --listen default not shown"
  failures=$((failures + 1))
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]

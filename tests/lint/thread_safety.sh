#!/usr/bin/env bash
# Checks the thread-safety annotations (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED,
# ...) with clang's -Wthread-safety analysis. The build uses GCC, where the
# annotations compile to nothing; this runs clang in syntax-only mode over every
# project source in the build's compile_commands.json (no objects, no link), so
# it costs a fraction of a second build. Exit 0 if clang found nothing; 77
# (skipped) without clang.
#
#   tests/lint/thread_safety.sh SOURCE_DIR BUILD_DIR
#
# Environment: TSA_JOBS: parallel clang processes (default 2).
set -uo pipefail
SRC=$(cd "${1:?source dir}" && pwd)
BUILD=$(cd "${2:?build dir}" && pwd)
CLANG=${CLANGXX:-clang++}
if ! command -v "$CLANG" >/dev/null; then
  echo "thread-safety: $CLANG is not installed (scripts/setup.sh installs it); skipped"
  exit 77
fi
if ! command -v jq >/dev/null; then
  echo "thread-safety: jq is not installed (scripts/setup.sh installs it); skipped"
  exit 77
fi
db="$BUILD/compile_commands.json"
[ -f "$db" ] || { echo "thread-safety: no $db"; exit 1; }

# One line per project C++ source: "directory<TAB>command". Generated code
# (under the build directory) and CUDA sources are left out.
list=$(mktemp)
trap 'rm -f "$list"' EXIT
jq -r --arg src "$SRC/" --arg build "$BUILD/" '.[]
  | select(.file | startswith($src))
  | select(.file | startswith($build) | not)
  | select(.file | endswith(".cc"))
  | "\(.directory)\t\(.command)"' "$db" >"$list"
n=$(wc -l <"$list")
[ "$n" -gt 0 ] || { echo "thread-safety: no sources in $db"; exit 1; }

check_one() {
  local dir=${1%%$'\t'*} cmd=${1#*$'\t'}
  # Drop the launcher (ccache) and the compiler, the output and -c; keep the
  # flags, defines and include paths.
  # The command is shell-quoted (defines hold quoted strings): parse it as the
  # shell would.
  local words
  eval "words=($cmd)"
  local args=() skip=0 w
  for w in "${words[@]:1}"; do
    if [ $skip = 1 ]; then skip=0; continue; fi
    case "$w" in
      -o) skip=1 ;;
      -c) ;;
      */c++|*/g++|c++|g++) args=() ;;  # after a launcher: start again
      *) args+=("$w") ;;
    esac
  done
  # The project's own warning flags (-Wall, ...) are GCC's concern; only the
  # thread-safety analysis is asked for here, and it is an error.
  cd "$dir" && "$CLANG" -fsyntax-only "${args[@]}" -Wno-everything \
    -Wthread-safety -Werror=thread-safety
}
export -f check_one
export CLANG
start=$(date +%s)
if tr '\n' '\0' <"$list" | xargs -0 -P "${TSA_JOBS:-2}" -I{} bash -c 'check_one "$1"' _ {}; then
  echo "thread-safety: $n sources, no warnings ($(($(date +%s) - start)) s)"
  exit 0
fi
echo "thread-safety: clang -Wthread-safety found the problems above"
exit 1

#!/usr/bin/env bash
# Runs clang-tidy (the checks of .clang-tidy: bugprone, performance and a
# cognitive-complexity bound) on the C++ sources this branch changed since
# its base, with the build's compile_commands.json. Exit 0 if clang-tidy
# reports nothing; 77 (skipped) without clang-tidy, git or a base to compare
# with.
#
#   tests/lint/tidy.sh SOURCE_DIR BUILD_DIR
#
# Environment: PS_TIDY_BASE: the commit to compare with (default: main);
# PS_TIDY_FILES: a space-separated list of sources instead of the changed ones.
set -uo pipefail
SRC=$(cd "${1:?source dir}" && pwd)
BUILD=$(cd "${2:?build dir}" && pwd)
TIDY=${CLANG_TIDY:-clang-tidy}
command -v "$TIDY" >/dev/null || { echo "tidy: $TIDY is not installed; skipped"; exit 77; }
cd "$SRC"
if [ -n "${PS_TIDY_FILES:-}" ]; then
  files=$PS_TIDY_FILES
else
  base=${PS_TIDY_BASE:-main}
  if ! git rev-parse --verify -q "$base" >/dev/null 2>&1; then
    echo "tidy: no base commit '$base' to compare with; skipped"
    exit 77
  fi
  files=$(git diff --name-only --diff-filter=AM "$(git merge-base "$base" HEAD)" -- '*.cc' |
          grep -v '^tests/fuzz/' || true)
fi
checked=0
failed=0
start=$(date +%s)
for f in $files; do
  # Only sources the build compiles (CUDA and generated code are not).
  grep -q "\"file\": \"$SRC/$f\"" "$BUILD/compile_commands.json" || continue
  checked=$((checked + 1))
  if ! "$TIDY" -p "$BUILD" --quiet "$SRC/$f" 2>/dev/null; then
    failed=1
  fi
done
echo "tidy: $checked changed sources checked in $(($(date +%s) - start)) s"
exit $failed

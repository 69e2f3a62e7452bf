#!/usr/bin/env bash
# Installs tests/deploy's locked npm packages (package-lock.json) with `npm ci`
# unless node_modules already holds them. Several test runs may share the
# source tree: an exclusive lock serializes the installs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE"
stamp=node_modules/.installed-lock-sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
exec 9>"$HERE/.npm-install.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "# npm ci in $HERE"
npm ci --no-audit --no-fund --loglevel=error >npm-ci.log 2>&1 || { cat npm-ci.log; exit 1; }
rm -f npm-ci.log
echo "$want" >"$stamp"

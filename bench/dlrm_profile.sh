#!/usr/bin/env bash
# examples/pytorch/run_dlrm.sh with its workers profiled (bench/
# dlrm_profile.py): PROFILE_DIR (default /tmp/dlrm-profile) gets main.prof
# and comm.prof of the first worker to finish, main-PID.prof and
# comm-PID.prof of the other. Same environment as run_dlrm.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
WRAP=$(mktemp -t ps-dlrm-python.XXXXXX)
trap 'rm -f "$WRAP"' EXIT
cat >"$WRAP" <<SH
#!/usr/bin/env bash
if [ "\${3:-}" = worker ]; then
  shift 2
  exec /usr/bin/python3 -u "$PWD/bench/dlrm_profile.py" "\$@"
fi
exec /usr/bin/python3 "\$@"
SH
chmod +x "$WRAP"
export PROFILE_DIR=${PROFILE_DIR:-/tmp/dlrm-profile}
rm -rf "$PROFILE_DIR"
PYTHON=$WRAP examples/pytorch/run_dlrm.sh "$@"

#!/usr/bin/env bash
# examples/pytorch/run_dlrm.sh with its workers profiled: MODE=cprofile
# (the default; bench/dlrm_profile.py): PROFILE_DIR (default
# /tmp/dlrm-profile) gets main.prof and comm.prof of the first worker to
# finish, main-PID.prof and comm-PID.prof of the other; MODE=phases
# (bench/dlrm_phases.py): PROFILE_DIR gets phases-PID.json of each worker,
# wall and CPU time per step of each phase of a step. Same environment as
# run_dlrm.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${MODE:-cprofile} in
  cprofile) SCRIPT=dlrm_profile.py ;;
  phases) SCRIPT=dlrm_phases.py ;;
  *) echo "dlrm_profile.sh: MODE is cprofile or phases" >&2; exit 2 ;;
esac
WRAP=$(mktemp -t ps-dlrm-python.XXXXXX)
trap 'rm -f "$WRAP"' EXIT
cat >"$WRAP" <<SH
#!/usr/bin/env bash
if [ "\${3:-}" = worker ]; then
  shift 2
  exec /usr/bin/python3 -u "$PWD/bench/$SCRIPT" "\$@"
fi
exec /usr/bin/python3 "\$@"
SH
chmod +x "$WRAP"
export PROFILE_DIR=${PROFILE_DIR:-/tmp/dlrm-profile}
rm -rf "$PROFILE_DIR"
PYTHON=$WRAP examples/pytorch/run_dlrm.sh "$@"

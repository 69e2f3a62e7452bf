#!/usr/bin/env bash
# Trains the DLRM-style model of dlrm_criteo.py on generated Criteo-format
# data on a local cluster: 1 coordinator and 2 parameter servers (the build
# tree's executables), 2 PyTorch workers (paramserver.torch.Worker with a
# ShardedEmbedding), each a separate process on loopback. Prints every
# epoch's test AUC and log loss, the teacher's best (the generator's hidden
# model: what a perfect model would score), and stops the cluster.
#
#   examples/pytorch/run_dlrm.sh [--epochs N] [other dlrm_criteo.py submit flags]
#
# DATA (default /tmp/ps-dlrm-data) holds train.tsv, test.tsv and
# teacher.json; they are generated there (bench/criteo_gen.py, TRAIN_ROWS
# default 200000, TEST_ROWS 50000, GEN_ARGS more options) unless present.
# Needs the Debian packages of scripts/setup.sh (python3-torch,
# python3-numpy); builds what it runs (the executables and build/python)
# unless PS_SKIP_BUILD=1. BUILD_DIR (default build) picks another build
# tree; RUN_DIR keeps the logs. SEED (default 1) seeds the job (data order,
# the table's rows) and the MLPs' initial values. TRANSPORT (auto, native
# or python; default auto) picks the workers' step transport
# (docs/python.md, "The compiled transport").
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${PS_SKIP_BUILD:-0}" != 1 ]; then
  BUILD_DIR=${BUILD_DIR:-build} bash scripts/build.sh \
    --target ps-coordinator ps-server paramserver_python >/dev/null
fi
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
RUN_DIR=${RUN_DIR:-$(mktemp -d -t ps-dlrm.XXXXXX)}
DATA=${DATA:-/tmp/ps-dlrm-data}
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"$PYTHON" -c 'import torch, paramserver' 2>/dev/null || {
  echo "run_dlrm.sh: needs python3-torch and the paramserver package in" \
       "$BUILD_DIR/python (scripts/setup.sh, then scripts/build.sh)" >&2
  exit 1
}
EXAMPLE=examples/pytorch/dlrm_criteo.py
if [ ! -e "$DATA/teacher.json" ]; then
  # shellcheck disable=SC2086  # GEN_ARGS are meant to split
  "$PYTHON" bench/criteo_gen.py --out "$DATA" \
    --train_rows "${TRAIN_ROWS:-200000}" --test_rows "${TEST_ROWS:-50000}" \
    ${GEN_ARGS:-} >/dev/null
fi
if [ ! -e "$DATA/dlrm.test.labels.npy" ] ||
   [ "$DATA/train.tsv" -nt "$DATA/dlrm.train.ids.npy" ]; then
  "$PYTHON" "$EXAMPLE" prepare --data "$DATA"
fi
source scripts/lib/cluster.sh
CLUSTER_BUILD_DIR=$BUILD_DIR
CLUSTER_RUN_DIR=$RUN_DIR
trap 'cluster_stop >/dev/null 2>&1 || true' EXIT
mkdir -p "$RUN_DIR"

cluster_spawn coordinator "$BUILD_DIR/coordinator/ps-coordinator" --listen=127.0.0.1:0 \
  --data_dir="$RUN_DIR/coordinator.data" --heartbeat_interval_ms=200 --metrics_port=-1
COORDINATOR="127.0.0.1:$(cluster_port "$RUN_DIR/coordinator.ports" grpc_port)"
for i in 0 1; do
  cluster_spawn "server$i" "$BUILD_DIR/server/ps-server" --coordinator="$COORDINATOR" \
    --data_dir="$RUN_DIR/server$i.data" --metrics_port=-1
done
SEED=${SEED:-1}
JOB=$("$PYTHON" "$EXAMPLE" submit --data "$DATA" --coordinator="$COORDINATOR" \
  --seed "$SEED" "$@")
echo "submitted $JOB; logs in $RUN_DIR"
for i in 0 1; do
  "$PYTHON" -u "$EXAMPLE" worker --data "$DATA" --coordinator="$COORDINATOR" \
    --seed "$SEED" --transport "${TRANSPORT:-auto}" \
    >"$RUN_DIR/pyworker$i.log" 2>&1 &
  CLUSTER_PIDS+=($!)
  CLUSTER_NAMES+=("pyworker$i")
done

"$PYTHON" - "$COORDINATOR" "$JOB" "$DATA/teacher.json" "$RUN_DIR" <<'PY'
import glob
import json
import sys
import paramserver as ps

coordinator, job, teacher_file, run_dir = sys.argv[1:]
with open(teacher_file) as f:
    teacher = json.load(f)
with ps.JobClient(coordinator) as client:
    shown = 0
    for status in client.watch(job):
        records = status.progress.epochs
        for r in records[shown:]:
            print(f"epoch {r.epoch:3d}  test AUC {r.test_auc:.4f}  "
                  f"log loss {r.test_log_loss:.4f}  "
                  f"{(r.end_time_ms - status.start_time_ms) / 1000:7.1f} s",
                  flush=True)
        shown = len(records)
    if status.state != ps.v1.SUCCEEDED:
        sys.exit(f"{job} {ps.v1.JobState.Name(status.state)}: {status.message}")
    train_seconds = None
    for log in glob.glob(f"{run_dir}/pyworker*.log"):
        for line in open(log):
            if line.startswith("{") and '"train_seconds"' in line:
                train_seconds = json.loads(line)["train_seconds"]
    total = (status.end_time_ms - status.start_time_ms) / 1000
    print(f"{job} SUCCEEDED in {total:.1f} s ({train_seconds} s of "
          f"training): test AUC {status.progress.test_auc:.4f}, log loss "
          f"{status.progress.test_log_loss:.4f}; the teacher's best: AUC "
          f"{teacher['best_test_auc']:.4f}, log loss "
          f"{teacher['best_test_log_loss']:.4f} (constant predictor "
          f"{teacher['constant_test_log_loss']:.4f})")
PY

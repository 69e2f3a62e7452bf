#!/usr/bin/env bash
# A click-through-rate job on sparse embedding tables (docs/sparse.md): writes
# Criteo-format data with a known teacher (bench/criteo_gen.py), then runs the
# local cluster of scripts/demo.sh on deploy/jobs/criteo-ctr.json pointed at
# it, and prints the test AUC and log loss beside the teacher's best.
#
#   scripts/ctr-demo.sh [TRAIN_ROWS] [TEST_ROWS]     (default: 200000 50000)
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN_ROWS=${1:-200000}
TEST_ROWS=${2:-50000}
DATA=$(mktemp -d -t ps-ctr-data.XXXXXX)

bash scripts/setup.sh
/usr/bin/python3 bench/criteo_gen.py --out "$DATA" --train_rows "$TRAIN_ROWS" \
  --test_rows "$TEST_ROWS" --max_cardinality 100000
/usr/bin/python3 - "$DATA" <<'PY'
import json, sys
data = sys.argv[1]
spec = json.load(open("deploy/jobs/criteo-ctr.json"))
spec["dataset"]["train_file"] = f"{data}/train.tsv"
spec["dataset"]["test_file"] = f"{data}/test.tsv"
json.dump(spec, open(f"{data}/job.json", "w"), indent=1)
teacher = json.load(open(f"{data}/teacher.json"))
print(f"teacher's best test AUC {teacher['best_test_auc']:.4f}, "
      f"log loss {teacher['best_test_log_loss']:.4f}")
PY
bash scripts/demo.sh "$DATA/job.json"

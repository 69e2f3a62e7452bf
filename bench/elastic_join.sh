#!/usr/bin/env bash
# Elastic workers: a worker added to a running 2-worker BSP job raises its
# samples/s (docs/benchmarks.md, "Elastic workers").
#
# On a fresh local cluster (1 coordinator, 2 servers, 2 workers), an elastic
# BSP job (num_workers 2, max_workers 3; Fashion-MNIST MLP 784-256-128-10,
# batch 64) trains; after JOIN_AFTER_S seconds a third worker process
# starts and joins it. The machine has 2 cores shared by every process, so
# compute is slowed on every worker (ps-worker --slowdown=SLOWDOWN: each
# step sleeps SLOWDOWN - 1 times its computation), which makes the workers
# stand for machines of their own: the cores are mostly idle and a step's
# time is its (slowed) compute, as on a real cluster. The job's samples/s is
# read from its own clocks: `psctl get` every POLL_S seconds gives the
# slowest worker's clock; samples/s over a window = clocks in it times the
# members' global batch (n * 64) over its length, before the change
# (excluding the first 3 s) and after it (from 2 s after the commit).
#
#   bench/elastic_join.sh [BUILD_DIR]      REPEATS=3 SLOWDOWN=8 JOIN_AFTER_S=15
set -euo pipefail
BUILD_DIR=$(cd "${1:-build}" && pwd)
SOURCE_DIR=$(cd "$(dirname "$0")/.." && pwd)
PSCTL=$BUILD_DIR/client/psctl
DATA_DIR=${PS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
REPEATS=${REPEATS:-3}
SLOWDOWN=${SLOWDOWN:-8}
JOIN_AFTER_S=${JOIN_AFTER_S:-15}
RUN_S=${RUN_S:-35}
POLL_S=${POLL_S:-0.5}
# shellcheck source=scripts/lib/cluster.sh disable=SC1091
source "$SOURCE_DIR/scripts/lib/cluster.sh"
OUT_DIR=$(mktemp -d -t ps-elastic-join.XXXXXX)
echo "# results in $OUT_DIR"

for round in $(seq 1 "$REPEATS"); do
  run=$OUT_DIR/round$round
  CLUSTER_PIDS=(); CLUSTER_NAMES=()
  CLUSTER_WORKER_ARGS=([0]="--slowdown=$SLOWDOWN" [1]="--slowdown=$SLOWDOWN")
  cluster_start "$BUILD_DIR" "$run" 2 2
  cat >"$run/job.json" <<EOF
{
  "name": "elastic-join",
  "model": { "kind": "MLP", "input_dim": 784, "num_classes": 10,
             "hidden_layers": [256, 128], "activation": "RELU" },
  "dataset": { "format": "IDX",
    "train_images": "$DATA_DIR/train-images-idx3-ubyte.gz",
    "train_labels": "$DATA_DIR/train-labels-idx1-ubyte.gz",
    "test_images": "$DATA_DIR/t10k-images-idx3-ubyte.gz",
    "test_labels": "$DATA_DIR/t10k-labels-idx1-ubyte.gz",
    "max_test_samples": 1000 },
  "epochs": 20, "batch_size": 64, "seed": 42,
  "optimizer": { "adam": { "learning_rate": 0.001 } },
  "consistency": { "model": "BSP" }, "durability": "MEMORY",
  "num_workers": 2, "min_workers": 1, "max_workers": 3, "num_servers": 2
}
EOF
  job=$("$PSCTL" --coordinator="$COORDINATOR" submit "$run/job.json" |
        sed -n 's/^submitted \(job-[0-9]*\)$/\1/p')
  start_ms=$(date +%s%3N)
  joined=0
  : >"$run/clocks.txt"
  # Polls (epoch ms, the job's clock) as fast as psctl answers.
  while true; do
    now_ms=$(date +%s%3N)
    if [ "$joined" = 0 ] && [ $((now_ms - start_ms)) -ge $((JOIN_AFTER_S * 1000)) ]; then
      cluster_spawn worker2 "$(cluster_binary worker ps-worker)" \
        --coordinator="$COORDINATOR" --device=cpu --compute_threads=1 \
        --slowdown="$SLOWDOWN"
      joined=1
    fi
    clock=$("$PSCTL" --coordinator="$COORDINATOR" get "$job" |
            sed -n '/"progress"/,/}/s/^ *"clock": "\{0,1\}\([0-9]*\)"\{0,1\},*$/\1/p' | head -n 1)
    echo "$now_ms ${clock:-0}" >>"$run/clocks.txt"
    [ $((now_ms - start_ms)) -ge $((RUN_S * 1000)) ] && break
    sleep "$POLL_S"
  done
  "$PSCTL" --coordinator="$COORDINATOR" get "$job" >"$run/status.json"
  "$PSCTL" --coordinator="$COORDINATOR" cancel "$job" >/dev/null || true
  cluster_stop >/dev/null 2>&1 || true
  python3 - "$run/clocks.txt" "$run/status.json" "$start_ms" <<'PY' | tee "$run/result.txt"
import json, sys
points = [tuple(map(int, l.split())) for l in open(sys.argv[1])]
status = json.load(open(sys.argv[2]))
start = int(sys.argv[3])
m = status["membership"]
commit_ms, commit_clock = int(m[-1]["time_ms"]), int(m[-1]["clock"])
def slope(pts):  # least squares clocks per ms
    n = len(pts)
    if n < 2: return float("nan")
    mt = sum(t for t, _ in pts) / n; mc = sum(c for _, c in pts) / n
    return sum((t - mt) * (c - mc) for t, c in pts) / sum((t - mt) ** 2 for t, _ in pts)
before = [(t, c) for t, c in points if start + 3000 <= t < commit_ms and c > 0]
after = [(t, c) for t, c in points if t >= commit_ms + 2000 and c > commit_clock]
b = slope(before) * 1000 * 2 * 64
a = slope(after) * 1000 * 3 * 64
print(f"before {b:.0f} samples/s  after {a:.0f} samples/s  (join committed "
      f"{(commit_ms - start) / 1000:.1f} s after submit at clock {commit_clock}; "
      f"{len(before)} and {len(after)} points)")
PY
done
echo "# medians over $REPEATS rounds:"
python3 - "$OUT_DIR" <<'PY'
import glob, re, statistics, sys
b, a = [], []
for f in sorted(glob.glob(sys.argv[1] + "/round*/result.txt")):
    m = re.search(r"before (\S+) samples/s  after (\S+)", open(f).read())
    b.append(float(m.group(1))); a.append(float(m.group(2)))
ratios = [y / x for x, y in zip(b, a)]
print(f"2 workers: median {statistics.median(b):.0f} samples/s; after the third "
      f"joined: median {statistics.median(a):.0f} samples/s; per-round ratios "
      f"{', '.join(f'{r:.2f}' for r in ratios)} (median x{statistics.median(ratios):.2f})")
PY

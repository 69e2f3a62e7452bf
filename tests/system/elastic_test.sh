#!/usr/bin/env bash
# System test of elastic workers (docs/consistency.md, "Membership
# changes"): real processes on loopback (1 coordinator, 2 servers, 4
# workers). An elastic BSP job (num_workers 4, min_workers 2) first runs
# undisturbed; then the same job runs again and two of its workers (not
# place 0, the evaluator) are killed with SIGKILL mid-job and not replaced.
# Checks:
#   - the disturbed job SUCCEEDS, its history shows the change (version 1:
#     2 workers) and `psctl watch` printed it;
#   - its test accuracy is within ACC_TOLERANCE of the undisturbed run's
#     (default 0.03: this short job is far from converged, and after the
#     change it takes twice as many steps of half the global batch, which
#     here gains about 2 points; the 0.5-point goal is measured on the full
#     data set in docs/benchmarks.md, "Elastic workers");
#   - every sample is trained at most once per epoch, and all but fewer than
#     one global batch of each epoch's remainder are trained, counted from
#     the workers' sample logs: a step counts if its push was acknowledged
#     (ack log) or, for a killed worker, if its clock is below that place's
#     left clock in the job's history (its push reached every server);
#   - no acknowledged push of a killed worker is at or beyond its left clock
#     (nothing acknowledged is given up and trained again).
#
#   bash tests/system/elastic_test.sh BUILD_DIR SOURCE_DIR
#
# Exits 77 (skipped) without the data set or python3. Keeps its run
# directory on failure (PS_KEEP_RUN_DIR=1: always). No timing is asserted.
set -euo pipefail
{
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 64
fi
BUILD_DIR=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
SAMPLES=${SAMPLES:-8192}     # training samples (a multiple of 4 * 32)
EPOCHS=${EPOCHS:-3}
ACC_TOLERANCE=${ACC_TOLERANCE:-0.03}
KILL_FRACTION=${KILL_FRACTION:-3}  # kill once 1/KILL_FRACTION of the clocks ran
# shellcheck source=tests/system/tap_lib.sh disable=SC1091
source "$SOURCE_DIR/tests/system/tap_lib.sh"
system_test_need_fashion_mnist
system_test_begin ps-elastic-test

write_job() {
  system_test_mlp_job "$1" name="$2" samples="$SAMPLES" test=10000 \
    epochs="$EPOCHS" batch=32 durability=MEMORY workers=4 servers=2 \
    min_workers=2 max_workers=4
}

# A lost worker's place is dropped 1 s after its lease (1.5 s) expires.
CLUSTER_COORDINATOR_ARGS="--lease_ms=1500 --recovery_grace_ms=1000"
for i in 0 1 2 3; do
  CLUSTER_WORKER_ARGS[$i]="--ack_log=$RUN_DIR/ack$i.txt --sample_log=$RUN_DIR/samples$i.txt"
done
cluster_start "$BUILD_DIR" "$RUN_DIR" 2 4 || fail "cluster did not start"
ok "cluster of 1 coordinator, 2 servers, 4 workers started"

# run_job NAME: submits and watches; prints the job id.
run_job() {
  write_job "$RUN_DIR/$1.json" "$1"
  timeout 300 "$PSCTL" --coordinator="$COORDINATOR" submit "$RUN_DIR/$1.json" \
    >"$RUN_DIR/$1.submit" 2>&1 || fail "submit $1" "$RUN_DIR/$1.submit"
  sed -n 's/^submitted \(job-[0-9]*\)$/\1/p' "$RUN_DIR/$1.submit"
}
accuracy() {
  timeout 30 "$PSCTL" --coordinator="$COORDINATOR" get "$1" >"$RUN_DIR/$1.json.out"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["state"], j["progress"]["test_accuracy"])' "$RUN_DIR/$1.json.out"
}

# 1. Undisturbed.
base=$(run_job undisturbed)
timeout 300 "$PSCTL" --coordinator="$COORDINATOR" watch "$base" >"$RUN_DIR/base.watch" 2>&1 ||
  fail "the undisturbed job did not succeed" "$RUN_DIR/base.watch"
read -r base_state base_acc <<<"$(accuracy "$base")"
ok "undisturbed job $base $base_state, test accuracy $base_acc"
rm -f "$RUN_DIR"/ack*.txt "$RUN_DIR"/samples*.txt

# 2. Two of four workers killed.
job=$(run_job disturbed)
timeout 300 "$PSCTL" --coordinator="$COORDINATOR" watch "$job" >"$RUN_DIR/job.watch" 2>&1 &
watcher=$!
total=$((SAMPLES / (4 * 32) * EPOCHS))
target=$((total / KILL_FRACTION))
victims=()
for _ in $(seq 1 600); do
  victims=()
  for i in 0 1 2 3; do
    line=$(tail -n 1 "$RUN_DIR/ack$i.txt" 2>/dev/null || true)
    [ -n "$line" ] || continue
    read -r _ place clock <<<"$line"
    if [ "$place" != 0 ] && [ "$clock" -ge "$target" ]; then victims+=("$i"); fi
  done
  [ "${#victims[@]}" -ge 2 ] && break
  sleep 0.1
done
[ "${#victims[@]}" -ge 2 ] || fail "the job never reached clock $target"
# kill -9 (cluster_kill's pipeline does not suit set -o pipefail).
for v in "${victims[0]}" "${victims[1]}"; do
  for i in "${!CLUSTER_NAMES[@]}"; do
    if [ "${CLUSTER_NAMES[$i]}" = "worker$v" ]; then
      kill -KILL "${CLUSTER_PIDS[$i]}"
      wait "${CLUSTER_PIDS[$i]}" 2>/dev/null || true
      unset "CLUSTER_PIDS[$i]" "CLUSTER_NAMES[$i]"
    fi
  done
done
ok "killed worker${victims[0]} and worker${victims[1]} (kill -9) past clock $target of $total"
wait "$watcher" || fail "the disturbed job did not succeed" "$RUN_DIR/job.watch"
read -r state acc <<<"$(accuracy "$job")"
[ "$state" = SUCCEEDED ] || fail "job $job is $state" "$RUN_DIR/$job.json.out"
ok "job $job SUCCEEDED with 2 workers left, test accuracy $acc (undisturbed $base_acc)"
# One change, or two when the leases expired at different ticks.
grep -q "membership version [12] from clock .*: 2 workers" "$RUN_DIR/job.watch" ||
  fail "psctl watch did not show the change" "$RUN_DIR/job.watch"
ok "psctl watch showed: $(grep 'membership version [12]' "$RUN_DIR/job.watch" | paste -sd ';')"
python3 - "$base_acc" "$acc" "$ACC_TOLERANCE" <<'PY' || fail "accuracy differs by more than $ACC_TOLERANCE"
import sys
base, acc, tol = map(float, sys.argv[1:])
print(f"# accuracy difference {acc - base:+.4f} (tolerance {tol})")
sys.exit(0 if abs(acc - base) <= tol else 1)
PY
ok "accuracy within $ACC_TOLERANCE of the undisturbed run"

# 3. Coverage and acknowledgements, from the workers' logs.
python3 - "$RUN_DIR" "$job" "$SAMPLES" <<'PY' || fail "coverage check failed"
import glob, json, sys
run, job, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
status = json.load(open(f"{run}/{job}.json.out"))
history = status["membership"]
left = {}  # place -> first clock not applied everywhere
for change in history:
    for place, clock in zip(change.get("left", []), change.get("left_clocks", [])):
        left[int(place)] = int(clock)
acked = set()
for path in glob.glob(f"{run}/ack*.txt"):
    for line in open(path):
        j, place, clock = line.split()
        if j == job:
            acked.add((int(place), int(clock)))
steps = {}  # (place, clock) -> (epoch, samples); the latest line wins
for path in glob.glob(f"{run}/samples*.txt"):
    for line in open(path):
        f = line.split()
        if f[0] == job:
            steps[(int(f[1]), int(f[2]))] = (int(f[3]), [int(s) for s in f[4:]])
bad = 0
for (place, clock) in acked:
    if place in left and clock >= left[place]:
        print(f"acknowledged push of left place {place} at clock {clock} >= its left clock {left[place]}")
        bad += 1
counts = {}
for (place, clock), (epoch, ids) in steps.items():
    applied = (place, clock) in acked or (place in left and clock < left[place])
    if not applied:
        continue
    for s in ids:
        counts.setdefault(epoch, {}).setdefault(s, 0)
        counts[epoch][s] += 1
global_batch = 2 * 32  # the last membership's global batch
for epoch in sorted(counts):
    c = counts[epoch]
    twice = sum(1 for n in c.values() if n > 1)
    missing = samples - len(c)
    print(f"# epoch {epoch}: {len(c)} of {samples} samples trained, {twice} more than once, {missing} not (remainder < {global_batch})")
    if twice or missing < 0 or missing >= global_batch:
        bad += 1
print(f"# membership: {[(h.get('version','0'), h['clock'], h['places'], h.get('left', []), h.get('left_clocks', [])) for h in history]}")
sys.exit(1 if bad else 0)
PY
ok "every sample trained once per epoch (but a remainder smaller than a global batch); no acknowledged push of a lost worker given up"
echo "1..$CHECKS"
exit 0
}

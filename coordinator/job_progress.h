// A job's progress as its workers report it: the aggregate over workers
// (JobProgress) and worker 0's per-epoch records. Pure functions.
#ifndef PS_COORDINATOR_JOB_PROGRESS_H_
#define PS_COORDINATOR_JOB_PROGRESS_H_

#include <cstdint>
#include <vector>

#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Most EpochRecords a job keeps (JobProgress.epochs).
inline constexpr int kMaxEpochRecords = 1000;

// The report of a worker that has not reported yet: every field unset but
// the test accuracy, AUC and log loss, -1 (not measured).
v1::ProgressReport NoReport();

// `report` as the coordinator keeps it for a job whose model measures AUC
// and log loss (`ctr`: a CTR model, or a model with sparse tables) or not:
// any other model's are -1 whatever was sent (a worker built before they
// existed sends 0).
v1::ProgressReport OwnMetrics(v1::ProgressReport report, bool ctr);

// `report` with `previous`'s test accuracy, AUC and log loss in place of
// those it does not carry (< 0): a worker's latest evaluation is kept until
// its next one.
v1::ProgressReport WithLatestEvaluation(const v1::ProgressReport& previous,
                                        v1::ProgressReport report);

// Sets `progress`'s epoch and clock (the slowest worker's), loss (mean over
// the workers that reported), samples per second (their sum), total clocks
// and the test accuracy (and a CTR model's AUC and log loss: those >= 0)
// worker 0 last measured, from each worker's latest
// report (`reports[w]`, an empty node_id for one that has not reported).
// `reports` is not empty.
void AggregateProgress(const std::vector<v1::ProgressReport>& reports,
                       v1::JobProgress* progress);

// Appends worker 0's end-of-epoch report to `progress`'s epoch records, at
// `now_ms` (its test AUC and log loss when they are >= 0). A repeated epoch (a
// replacement worker 0 redoing it) replaces the records from that epoch on;
// past kMaxEpochRecords the last one is replaced.
void RecordEpoch(const v1::ProgressReport& report, int64_t now_ms,
                 v1::JobProgress* progress);

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_PROGRESS_H_

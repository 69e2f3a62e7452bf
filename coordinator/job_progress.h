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

// Sets `progress`'s epoch and clock (the slowest worker's), loss (mean over
// the workers that reported), samples per second (their sum), total clocks
// and the test accuracy worker 0 last measured, from each worker's latest
// report (`reports[w]`, an empty node_id for one that has not reported).
// `reports` is not empty.
void AggregateProgress(const std::vector<v1::ProgressReport>& reports,
                       v1::JobProgress* progress);

// Appends worker 0's end-of-epoch report to `progress`'s epoch records, at
// `now_ms`. A repeated epoch (a replacement worker 0 redoing it) replaces the
// records from that epoch on; past kMaxEpochRecords the last one is replaced.
void RecordEpoch(const v1::ProgressReport& report, int64_t now_ms,
                 v1::JobProgress* progress);

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_PROGRESS_H_

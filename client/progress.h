// Human-readable rendering of a job's status for psctl.
#ifndef PS_CLIENT_PROGRESS_H_
#define PS_CLIENT_PROGRESS_H_

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ps/v1/job.pb.h"

namespace ps {

// A CTR model's test metrics, e.g. "auc 0.7712 logloss 0.4561"; a negative
// value (not measured) shows as "-".
std::string FormatBinaryMetrics(float auc, float log_loss);

// One line: id, state, epoch, a progress bar of `bar_width` cells, loss,
// samples/s, the learning rate of the slowest worker's latest update (the
// spec's schedule at progress.clock - 1; when the spec names an optimizer)
// and the latest test accuracy (a CTR model: its AUC and log loss), e.g.
// "job-000001 RUNNING epoch 3/15 [#####-----]  20%  loss 0.4120  5321 samples/s
// lr 0.0009511  test acc 0.8512 (epoch 3)", or for a CTR model "...  test auc
// 0.7712 logloss 0.4561 (epoch 3)".
// A pending job shows what it waits for (its message); a running job with
// vacant places ends with FormatVacancies.
std::string FormatProgressLine(const v1::JobStatus& job, int bar_width = 24,
                               absl::Time now = absl::Now());

// The places of a running job waiting for a node, e.g. "waiting for server 0
// (10.0.0.1:7100, vacant 12s, the job fails in 48s)"; "" when there are none.
std::string FormatVacancies(const v1::JobStatus& job, absl::Time now);

// One membership change of an elastic job, as `psctl watch` prints it:
// "membership version 1 from clock 96: workers [0 1] (worker 2, 3 lost ...)".
std::string FormatMembershipChange(const v1::MembershipChange& change);

// The closing summary of a job: state, message, wall time, vacant places,
// accuracy (a CTR model: AUC and log loss) and FormatEpochTimes.
std::string FormatSummary(const v1::JobStatus& job);

// Time to each epoch from the job's epoch records (JobProgress.epochs): a
// header line, then one line per epoch with the seconds since the job
// started running, the test accuracy (a CTR model: AUC and log loss) and
// worker 0's loss, e.g. "epoch  2 at    6.3 s  test acc 0.8501  loss 0.3890"
// or "epoch  2 at   61.0 s  test auc 0.7712 logloss 0.4561  loss 0.4620". Past
// 20 records, the first and last 10 with a line saying how many are left out.
// "" when there are none.
std::string FormatEpochTimes(const v1::JobStatus& job);

// One row of `psctl list`: id, state, name, epoch and the test accuracy (a
// CTR model: its AUC).
std::string FormatListRow(const v1::JobStatus& job);

}  // namespace ps

#endif  // PS_CLIENT_PROGRESS_H_

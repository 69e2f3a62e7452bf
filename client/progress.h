// Human-readable rendering of a job's status for psctl.
#ifndef PS_CLIENT_PROGRESS_H_
#define PS_CLIENT_PROGRESS_H_

#include <string>

#include "ps/v1/job.pb.h"

namespace ps {

// One line: id, state, epoch, a progress bar of `bar_width` cells, loss,
// samples/s and the latest test accuracy, e.g.
// "job-000001 RUNNING epoch 3/15 [#####-----]  20%  loss 0.4120  5321 samples/s
// test acc 0.8512 (epoch 3)".
std::string FormatProgressLine(const v1::JobStatus& job, int bar_width = 24);

// The closing summary of a finished job: state, message, accuracy, wall time.
std::string FormatSummary(const v1::JobStatus& job);

// One row of `psctl list`.
std::string FormatListRow(const v1::JobStatus& job);

}  // namespace ps

#endif  // PS_CLIENT_PROGRESS_H_

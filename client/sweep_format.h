// Human-readable rendering of a sweep's status for psctl.
#ifndef PS_CLIENT_SWEEP_FORMAT_H_
#define PS_CLIENT_SWEEP_FORMAT_H_

#include <string>

#include "ps/v1/sweep.pb.h"

namespace ps {

// One line: id, state, trials ended / in all, running, stopped early, the
// best so far, and each running trial's epochs and latest test accuracy,
// e.g. "sweep-000001 SWEEP_RUNNING  3/8 trials ended (1 stopped early), 1
// running  best: trial 2 0.8990  [trial 3 epoch 4 acc 0.8712]".
std::string FormatSweepLine(const v1::SweepStatus& sweep);

// The trials table: one row per trial with its parameter values, job,
// state, epochs reported, final (or best so far) test accuracy and a note
// (stopped early, why it failed), then the sweep's message; the best trial
// is marked with '*'.
std::string FormatSweepTable(const v1::SweepStatus& sweep);

// One row of `psctl sweep list`.
std::string FormatSweepListRow(const v1::SweepStatus& sweep);

}  // namespace ps

#endif  // PS_CLIENT_SWEEP_FORMAT_H_

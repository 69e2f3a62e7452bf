// Checks of a submitted sweep, each refusal naming the field, and the job
// spec of each trial. Pure functions; thread-safe.
#ifndef PS_COORDINATOR_SWEEP_VALIDATION_H_
#define PS_COORDINATOR_SWEEP_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/request_validation.h"
#include "coordinator/sweep/sweep_search.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/sweep.pb.h"

namespace ps {

// Most parameters in one sweep.
inline constexpr int kMaxSweepParameters = 16;
// Most values or choices of one parameter, and grid points of a range.
inline constexpr int kMaxSweepValues = 100;
// Most trials of one sweep running at once.
inline constexpr int kMaxConcurrentTrials = 64;
// Longest choice (an enum name, a string, a message's JSON).
inline constexpr size_t kMaxChoiceBytes = 4096;

// Fills the documented defaults: max_concurrent_trials 0 -> 1, and with
// median stopping grace_epochs 0 -> 1, min_trials 0 -> 2.
void ApplySweepDefaults(v1::SweepSpec* spec);

// The job name of trial `index` of sweep `sweep_id`:
// "<sweep_id>-trial-<index>".
std::string TrialJobName(const std::string& sweep_id, int index);

// The job spec of one trial: `spec.base` with `trial` set in order and the
// name `job_name`. INVALID_ARGUMENT (naming "parameters[i]") if a value
// cannot be set.
absl::StatusOr<v1::JobSpec> TrialJobSpec(const v1::SweepSpec& spec,
                                         const TrialAssignments& trial,
                                         const std::string& job_name);

// Checks a sweep (after ApplySweepDefaults) and returns its trials
// (GenerateTrials). INVALID_ARGUMENT whose message starts with the field's
// path ("parameters[1].range.min: ...", "max_trials: ..."); for a trial
// whose job spec SubmitJob would refuse, "trials[i] (path=value, ...): "
// followed by that refusal (ValidateSubmittedSpec with `limits`; its code,
// RESOURCE_EXHAUSTED for a model over limits.max_model_bytes).
absl::StatusOr<std::vector<TrialAssignments>> ValidateSweepSpec(
    const v1::SweepSpec& spec, const JobLimits& limits);

}  // namespace ps

#endif  // PS_COORDINATOR_SWEEP_VALIDATION_H_

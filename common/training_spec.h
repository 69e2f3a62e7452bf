// Validation of the worker-side training options of a job spec: gradient
// clipping and accumulation (docs/training.md).
#ifndef PS_COMMON_TRAINING_SPEC_H_
#define PS_COMMON_TRAINING_SPEC_H_

#include "absl/status/status.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Most micro-batches per push (JobSpec.accumulation_steps).
inline constexpr int32_t kMaxAccumulationSteps = 1024;

// OK if spec.gradient_clipping's bounds are 0 (off) or > 0 and finite, and
// spec.accumulation_steps is 0 (meaning 1) to kMaxAccumulationSteps with
// batch_size * accumulation_steps at most 2^20. Errors: INVALID_ARGUMENT
// whose message starts with the field's path, e.g.
// "gradient_clipping.max_global_norm: must be >= 0, got -1".
absl::Status ValidateTrainingOptions(const v1::JobSpec& spec);

}  // namespace ps

#endif  // PS_COMMON_TRAINING_SPEC_H_

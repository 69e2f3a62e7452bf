// Validation of the worker-side training options of a job spec: gradient
// clipping, accumulation, local SGD and the non-IID data partition
// (docs/training.md).
#ifndef PS_COMMON_TRAINING_SPEC_H_
#define PS_COMMON_TRAINING_SPEC_H_

#include "absl/status/status.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Most micro-batches per push (JobSpec.accumulation_steps).
inline constexpr int32_t kMaxAccumulationSteps = 1024;

// Most local steps per round (LocalSgdSpec.local_steps).
inline constexpr int32_t kMaxLocalSteps = 1024;

// OK if spec.gradient_clipping's bounds are 0 (off) or > 0 and finite;
// spec.accumulation_steps is 0 (meaning 1) to kMaxAccumulationSteps with
// batch_size * accumulation_steps at most 2^20; spec.local_sgd is off
// (local_steps 0, no local_optimizer) or has local_steps 1 to
// kMaxLocalSteps, BSP, a built-in model, batch_size * accumulation_steps *
// local_steps at most 2^20 and a local_optimizer with learning_rate > 0,
// momentum in [0, 1) and weight_decay >= 0; and
// spec.dataset.labels_per_worker is 0 (IID) or 1 to model.num_classes, with
// labels_per_worker * num_workers >= num_classes, for a built-in model.
// `spec.model` must be valid. Errors: INVALID_ARGUMENT whose message starts
// with the field's path, e.g.
// "gradient_clipping.max_global_norm: must be >= 0, got -1".
absl::Status ValidateTrainingOptions(const v1::JobSpec& spec);

}  // namespace ps

#endif  // PS_COMMON_TRAINING_SPEC_H_

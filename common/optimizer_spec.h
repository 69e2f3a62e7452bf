// The optimizer part of a job spec: documented defaults and validation, shared
// by the coordinator (at submit) and the servers (Optimizer::Create).
#ifndef PS_COMMON_OPTIMIZER_SPEC_H_
#define PS_COMMON_OPTIMIZER_SPEC_H_

#include "absl/status/status.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Fills the documented defaults of the set optimizer's unset (zero) fields:
// Adam, AdamW and LAMB beta1 0.9 and beta2 0.999, epsilon 1e-8 (LAMB 1e-6);
// RMSprop alpha 0.99 and epsilon 1e-8; Adagrad epsilon 1e-10; the schedule's
// cosine_restarts.period_multiplier 1. Thread-compatible.
void ApplyOptimizerDefaults(v1::OptimizerSpec* optimizer);

// OK if `optimizer` (after ApplyOptimizerDefaults) is valid: a kind is set;
// learning_rate > 0; betas, momentum in [0, 1); RMSprop's alpha in (0, 1);
// epsilon > 0; weight_decay and initial_accumulator_value >= 0; every value
// finite; the schedule valid (ValidateSchedule). Errors: INVALID_ARGUMENT
// whose message starts with the field's path, e.g.
// "optimizer.adamw.beta1: must be in [0, 1), got 1", or
// "optimizer: set one of sgd, adam, adamw, rmsprop, adagrad, lamb".
absl::Status ValidateOptimizerSpec(const v1::OptimizerSpec& optimizer);

}  // namespace ps

#endif  // PS_COMMON_OPTIMIZER_SPEC_H_

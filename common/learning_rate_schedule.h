// Learning-rate schedules (docs/training.md): the rate of the update of a
// clock, a pure function of the optimizer spec and the clock, so that every
// server of a job, and psctl, compute the same value without talking.
#ifndef PS_COMMON_LEARNING_RATE_SCHEDULE_H_
#define PS_COMMON_LEARNING_RATE_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Largest warmup_clocks, step_clocks, decay_clocks or period_clocks a
// schedule may name (2^40: far beyond any job, and small enough that no
// arithmetic on clocks overflows).
inline constexpr int64_t kMaxScheduleClocks = int64_t{1} << 40;
// Largest CosineRestartsSchedule.period_multiplier.
inline constexpr int32_t kMaxPeriodMultiplier = 16;

// f(t): the factor the schedule applies to the optimizer's learning rate at
// clock t (t >= 0; a negative t is taken as 0). `schedule` must be valid
// (ValidateSchedule); period_multiplier 0 means 1. In (0, 1] except where
// min_factor or gamma allow 0 or an exponential decay underflows. Pure and
// thread-safe.
double ScheduleFactor(const v1::LearningRateSchedule& schedule, int64_t t);

// The optimizer's base learning rate (of whichever kind is set; 0 if none).
float BaseLearningRate(const v1::OptimizerSpec& optimizer);

// The learning rate of the update of clock t: BaseLearningRate *
// ScheduleFactor, in float as the optimizers use it. Thread-safe.
float LearningRateAt(const v1::OptimizerSpec& optimizer, int64_t t);

// OK if `schedule` is valid (after defaults: period_multiplier 0 means 1).
// Errors: INVALID_ARGUMENT whose message starts with the field's path under
// "optimizer.schedule", e.g. "optimizer.schedule.cosine.decay_clocks: must
// be >= 1".
absl::Status ValidateSchedule(const v1::LearningRateSchedule& schedule);

}  // namespace ps

#endif  // PS_COMMON_LEARNING_RATE_SCHEDULE_H_

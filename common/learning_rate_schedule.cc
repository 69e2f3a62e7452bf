#include "common/learning_rate_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// m + (1 - m) (1 + cos(pi u / period)) / 2.
double Cosine(double min_factor, double u, double period) {
  return min_factor + (1.0 - min_factor) * 0.5 *
                          (1.0 + std::cos(std::numbers::pi * u / period));
}

// The factor of a schedule's kind at t clocks after its warmup.
double KindFactor(const v1::LearningRateSchedule& schedule, int64_t t) {
  switch (schedule.kind_case()) {
    case v1::LearningRateSchedule::kStepDecay: {
      const auto& s = schedule.step_decay();
      const int64_t steps = t / s.step_clocks();
      return std::pow(static_cast<double>(s.gamma()),
                      static_cast<double>(steps));
    }
    case v1::LearningRateSchedule::kExponentialDecay:
      return std::exp(
          -static_cast<double>(schedule.exponential_decay().decay_rate()) *
          static_cast<double>(t));
    case v1::LearningRateSchedule::kCosine: {
      const auto& s = schedule.cosine();
      if (t >= s.decay_clocks()) return s.min_factor();
      return Cosine(s.min_factor(), static_cast<double>(t),
                    static_cast<double>(s.decay_clocks()));
    }
    case v1::LearningRateSchedule::kCosineRestarts: {
      const auto& s = schedule.cosine_restarts();
      const int64_t multiplier = std::max(1, s.period_multiplier());
      int64_t period = s.period_clocks();
      int64_t u = t;
      if (multiplier == 1) {
        u %= period;
      } else {
        // Periods grow geometrically, so t < 2^63 takes at most 63 turns
        // (a period that cannot grow further is over 2^59: 16 more at most).
        while (u >= period) {
          u -= period;
          if (period <= std::numeric_limits<int64_t>::max() / multiplier) {
            period *= multiplier;
          }
        }
      }
      return Cosine(s.min_factor(), static_cast<double>(u),
                    static_cast<double>(period));
    }
    case v1::LearningRateSchedule::kConstant:
    case v1::LearningRateSchedule::KIND_NOT_SET:
      break;
  }
  return 1.0;
}

absl::Status Invalid(absl::string_view field, absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.schedule.", field, ": ", rule));
}

absl::Status CheckClocks(absl::string_view field, int64_t value, int64_t min) {
  if (value < min || value > kMaxScheduleClocks) {
    return Invalid(field,
                   absl::StrCat("must be in [", min, ", 2^40], got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckMinFactor(absl::string_view field, float value) {
  if (!(value >= 0 && value <= 1)) {
    return Invalid(field, absl::StrCat("must be in [0, 1], got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

double ScheduleFactor(const v1::LearningRateSchedule& schedule, int64_t t) {
  t = std::max<int64_t>(t, 0);
  const int64_t warmup = schedule.warmup_clocks();
  if (warmup > 0 && t < warmup) {
    return static_cast<double>(t + 1) / static_cast<double>(warmup);
  }
  return KindFactor(schedule, t - std::max<int64_t>(warmup, 0));
}

float BaseLearningRate(const v1::OptimizerSpec& optimizer) {
  switch (optimizer.kind_case()) {
    case v1::OptimizerSpec::kSgd:
      return optimizer.sgd().learning_rate();
    case v1::OptimizerSpec::kAdam:
      return optimizer.adam().learning_rate();
    case v1::OptimizerSpec::kAdamw:
      return optimizer.adamw().learning_rate();
    case v1::OptimizerSpec::kRmsprop:
      return optimizer.rmsprop().learning_rate();
    case v1::OptimizerSpec::kAdagrad:
      return optimizer.adagrad().learning_rate();
    case v1::OptimizerSpec::kLamb:
      return optimizer.lamb().learning_rate();
    case v1::OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return 0;
}

float LearningRateAt(const v1::OptimizerSpec& optimizer, int64_t t) {
  return static_cast<float>(BaseLearningRate(optimizer) *
                            ScheduleFactor(optimizer.schedule(), t));
}

absl::Status ValidateSchedule(const v1::LearningRateSchedule& schedule) {
  if (auto s = CheckClocks("warmup_clocks", schedule.warmup_clocks(), 0);
      !s.ok()) {
    return s;
  }
  switch (schedule.kind_case()) {
    case v1::LearningRateSchedule::kStepDecay: {
      const auto& s = schedule.step_decay();
      if (auto st = CheckClocks("step_decay.step_clocks", s.step_clocks(), 1);
          !st.ok()) {
        return st;
      }
      if (!(s.gamma() > 0 && s.gamma() <= 1)) {
        return Invalid("step_decay.gamma",
                       absl::StrCat("must be in (0, 1], got ", s.gamma()));
      }
      return absl::OkStatus();
    }
    case v1::LearningRateSchedule::kExponentialDecay: {
      const float rate = schedule.exponential_decay().decay_rate();
      if (!(rate >= 0) || !std::isfinite(rate)) {
        return Invalid("exponential_decay.decay_rate",
                       absl::StrCat("must be >= 0, got ", rate));
      }
      return absl::OkStatus();
    }
    case v1::LearningRateSchedule::kCosine: {
      const auto& s = schedule.cosine();
      if (auto st = CheckClocks("cosine.decay_clocks", s.decay_clocks(), 1);
          !st.ok()) {
        return st;
      }
      return CheckMinFactor("cosine.min_factor", s.min_factor());
    }
    case v1::LearningRateSchedule::kCosineRestarts: {
      const auto& s = schedule.cosine_restarts();
      if (auto st = CheckClocks("cosine_restarts.period_clocks",
                                s.period_clocks(), 1);
          !st.ok()) {
        return st;
      }
      if (s.period_multiplier() < 0 ||
          s.period_multiplier() > kMaxPeriodMultiplier) {
        return Invalid("cosine_restarts.period_multiplier",
                       absl::StrCat("must be in [1, ", kMaxPeriodMultiplier,
                                    "] (0: 1), got ", s.period_multiplier()));
      }
      return CheckMinFactor("cosine_restarts.min_factor", s.min_factor());
    }
    case v1::LearningRateSchedule::kConstant:
    case v1::LearningRateSchedule::KIND_NOT_SET:
      break;
  }
  return absl::OkStatus();
}

}  // namespace ps

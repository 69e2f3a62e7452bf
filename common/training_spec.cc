#include "common/training_spec.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

absl::Status CheckBound(absl::string_view field, float value) {
  if (!(value >= 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient_clipping.", field, ": must be >= 0 (0: off), got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainingOptions(const v1::JobSpec& spec) {
  if (auto s = CheckBound("max_value", spec.gradient_clipping().max_value());
      !s.ok()) {
    return s;
  }
  if (auto s = CheckBound("max_global_norm",
                          spec.gradient_clipping().max_global_norm());
      !s.ok()) {
    return s;
  }
  const int32_t k = spec.accumulation_steps();
  if (k < 0 || k > kMaxAccumulationSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("accumulation_steps: must be in [1, ",
                     kMaxAccumulationSteps, "] (0: 1), got ", k));
  }
  if (static_cast<int64_t>(spec.batch_size()) * (k == 0 ? 1 : k) >
      (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accumulation_steps: batch_size * accumulation_steps must be <= "
        "1048576, got ",
        spec.batch_size(), " * ", k));
  }
  return absl::OkStatus();
}

}  // namespace ps

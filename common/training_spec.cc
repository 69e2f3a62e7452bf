#include "common/training_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

absl::Status CheckBound(absl::string_view field, float value) {
  if (!(value >= 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient_clipping.", field, ": must be >= 0 (0: off), got ", value));
  }
  return absl::OkStatus();
}

absl::Status LocalSgdInvalid(absl::string_view field,
                             absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("local_sgd.", field, ": ", problem));
}

// Local SGD: H in [0, kMaxLocalSteps]; when on, BSP and a valid local SGD.
absl::Status ValidateLocalSgd(const v1::JobSpec& spec) {
  const v1::LocalSgdSpec& local = spec.local_sgd();
  const int32_t h = local.local_steps();
  if (h < 0 || h > kMaxLocalSteps) {
    return LocalSgdInvalid(
        "local_steps",
        absl::StrCat("must be in [1, ", kMaxLocalSteps, "] (0: off), got ", h));
  }
  if (h == 0) {
    if (local.has_local_optimizer()) {
      return LocalSgdInvalid("local_optimizer",
                             "set only with local_steps >= 1");
    }
    return absl::OkStatus();
  }
  if (spec.model().kind() == v1::ModelSpec::EXTERNAL) {
    return LocalSgdInvalid("local_steps",
                           "not for EXTERNAL models (their Python workers "
                           "push gradients)");
  }
  const auto model = spec.consistency().model();
  if (model != v1::ConsistencySpec::BSP &&
      model != v1::ConsistencySpec::MODEL_UNSPECIFIED) {
    return LocalSgdInvalid(
        "local_steps",
        "needs consistency.model BSP (a round is one clock whose changes "
        "the servers average)");
  }
  const int64_t samples =
      int64_t{spec.batch_size()} * std::max(1, spec.accumulation_steps()) * h;
  if (samples > (int64_t{1} << 20)) {
    return LocalSgdInvalid(
        "local_steps",
        absl::StrCat("batch_size * accumulation_steps * local_steps must be "
                     "<= 1048576, got ",
                     samples));
  }
  const v1::SgdOptions& o = local.local_optimizer();
  if (!(o.learning_rate() > 0) || !std::isfinite(o.learning_rate())) {
    return LocalSgdInvalid(
        "local_optimizer.learning_rate",
        absl::StrCat("must be > 0 (required with local_steps >= 1), got ",
                     o.learning_rate()));
  }
  if (!(o.momentum() >= 0 && o.momentum() < 1)) {
    return LocalSgdInvalid(
        "local_optimizer.momentum",
        absl::StrCat("must be in [0, 1), got ", o.momentum()));
  }
  if (!(o.weight_decay() >= 0) || !std::isfinite(o.weight_decay())) {
    return LocalSgdInvalid(
        "local_optimizer.weight_decay",
        absl::StrCat("must be >= 0, got ", o.weight_decay()));
  }
  return absl::OkStatus();
}

// The non-IID partition: every label on some worker.
absl::Status ValidateLabelPartition(const v1::JobSpec& spec) {
  const int32_t k = spec.dataset().labels_per_worker();
  if (k == 0) return absl::OkStatus();
  auto invalid = [](absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.labels_per_worker: ", problem));
  };
  if (spec.model().kind() == v1::ModelSpec::EXTERNAL) {
    return invalid("not for EXTERNAL models (their workers bring their data)");
  }
  const int32_t classes = spec.model().num_classes();
  if (k < 0 || k > classes) {
    return invalid(absl::StrCat("must be in [1, model.num_classes = ", classes,
                                "] (0: IID), got ", k));
  }
  // (num_workers < 1 is refused by ValidateJobSpec, naming num_workers.)
  if (spec.num_workers() >= 1 && int64_t{k} * spec.num_workers() < classes) {
    return invalid(absl::StrCat(
        "labels_per_worker * num_workers must be >= model.num_classes so "
        "that every label is trained on, got ",
        k, " * ", spec.num_workers(), " < ", classes));
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
  PS_RETURN_IF_ERROR(ValidateLocalSgd(spec));
  return ValidateLabelPartition(spec);
}

}  // namespace ps

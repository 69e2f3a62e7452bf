#include "common/optimizer_spec.h"

#include <cmath>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/learning_rate_schedule.h"

namespace ps {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view rule,
                     float value) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, ": must be ", rule, ", got ", value));
}

// NaN fails every check below: each is written as "!(valid)".
absl::Status Positive(absl::string_view field, float value) {
  if (!(value > 0 && std::isfinite(value))) return Invalid(field, "> 0", value);
  return absl::OkStatus();
}

absl::Status NonNegative(absl::string_view field, float value) {
  if (!(value >= 0 && std::isfinite(value))) {
    return Invalid(field, ">= 0", value);
  }
  return absl::OkStatus();
}

absl::Status UnitInterval(absl::string_view field, float value) {
  if (!(value >= 0 && value < 1)) return Invalid(field, "in [0, 1)", value);
  return absl::OkStatus();
}

absl::Status OpenUnitInterval(absl::string_view field, float value) {
  if (!(value > 0 && value < 1)) return Invalid(field, "in (0, 1)", value);
  return absl::OkStatus();
}

absl::Status First(std::initializer_list<absl::Status> checks) {
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

template <typename Options>
void AdamDefaults(Options* o, float epsilon) {
  if (o->beta1() == 0) o->set_beta1(0.9f);
  if (o->beta2() == 0) o->set_beta2(0.999f);
  if (o->epsilon() == 0) o->set_epsilon(epsilon);
}

template <typename Options>
absl::Status AdamLike(const std::string& kind, const Options& o) {
  return First({Positive(kind + ".learning_rate", o.learning_rate()),
                UnitInterval(kind + ".beta1", o.beta1()),
                UnitInterval(kind + ".beta2", o.beta2()),
                Positive(kind + ".epsilon", o.epsilon()),
                NonNegative(kind + ".weight_decay", o.weight_decay())});
}

absl::Status ValidateKind(const v1::OptimizerSpec& optimizer) {
  switch (optimizer.kind_case()) {
    case v1::OptimizerSpec::kSgd: {
      const auto& o = optimizer.sgd();
      return First({Positive("sgd.learning_rate", o.learning_rate()),
                    UnitInterval("sgd.momentum", o.momentum()),
                    NonNegative("sgd.weight_decay", o.weight_decay())});
    }
    case v1::OptimizerSpec::kAdam:
      return AdamLike("adam", optimizer.adam());
    case v1::OptimizerSpec::kAdamw:
      return AdamLike("adamw", optimizer.adamw());
    case v1::OptimizerSpec::kLamb:
      return AdamLike("lamb", optimizer.lamb());
    case v1::OptimizerSpec::kRmsprop: {
      const auto& o = optimizer.rmsprop();
      return First({Positive("rmsprop.learning_rate", o.learning_rate()),
                    OpenUnitInterval("rmsprop.alpha", o.alpha()),
                    Positive("rmsprop.epsilon", o.epsilon()),
                    UnitInterval("rmsprop.momentum", o.momentum()),
                    NonNegative("rmsprop.weight_decay", o.weight_decay())});
    }
    case v1::OptimizerSpec::kAdagrad: {
      const auto& o = optimizer.adagrad();
      return First({Positive("adagrad.learning_rate", o.learning_rate()),
                    Positive("adagrad.epsilon", o.epsilon()),
                    NonNegative("adagrad.weight_decay", o.weight_decay()),
                    NonNegative("adagrad.initial_accumulator_value",
                                o.initial_accumulator_value())});
    }
    case v1::OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "optimizer: set one of sgd, adam, adamw, rmsprop, adagrad, lamb");
}

}  // namespace

void ApplyOptimizerDefaults(v1::OptimizerSpec* optimizer) {
  switch (optimizer->kind_case()) {
    case v1::OptimizerSpec::kAdam:
      AdamDefaults(optimizer->mutable_adam(), 1e-8f);
      break;
    case v1::OptimizerSpec::kAdamw:
      AdamDefaults(optimizer->mutable_adamw(), 1e-8f);
      break;
    case v1::OptimizerSpec::kLamb:
      AdamDefaults(optimizer->mutable_lamb(), 1e-6f);
      break;
    case v1::OptimizerSpec::kRmsprop: {
      auto* o = optimizer->mutable_rmsprop();
      if (o->alpha() == 0) o->set_alpha(0.99f);
      if (o->epsilon() == 0) o->set_epsilon(1e-8f);
      break;
    }
    case v1::OptimizerSpec::kAdagrad: {
      auto* o = optimizer->mutable_adagrad();
      if (o->epsilon() == 0) o->set_epsilon(1e-10f);
      break;
    }
    default:
      break;
  }
  if (optimizer->schedule().has_cosine_restarts() &&
      optimizer->schedule().cosine_restarts().period_multiplier() == 0) {
    optimizer->mutable_schedule()
        ->mutable_cosine_restarts()
        ->set_period_multiplier(1);
  }
}

absl::Status ValidateOptimizerSpec(const v1::OptimizerSpec& optimizer) {
  if (auto s = ValidateKind(optimizer); !s.ok()) return s;
  return ValidateSchedule(optimizer.schedule());
}

}  // namespace ps

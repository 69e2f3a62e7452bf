// Learning-rate schedules against values computed by hand from the formulas
// in docs/training.md.
#include "common/learning_rate_schedule.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/optimizer_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::StartsWith;

v1::LearningRateSchedule FromJson(const std::string& json) {
  v1::OptimizerSpec optimizer;
  auto spec = JobSpecFromJson(
      "{\"optimizer\": {\"sgd\": {\"learning_rate\": 1}, \"schedule\": " +
      json + "}}");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? spec->optimizer().schedule() : v1::LearningRateSchedule();
}

TEST(LearningRateScheduleTest, UnsetIsConstant) {
  const v1::LearningRateSchedule none;
  for (int64_t t : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 50}) {
    EXPECT_EQ(ScheduleFactor(none, t), 1.0) << t;
  }
  EXPECT_EQ(ScheduleFactor(FromJson(R"({"constant": {}})"), 77), 1.0);
}

TEST(LearningRateScheduleTest, LinearWarmupThenConstant) {
  const auto s = FromJson(R"({"warmup_clocks": 4})");
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 0), 0.25);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 1), 0.5);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 2), 0.75);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 3), 1.0);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 4), 1.0);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 100), 1.0);
  // A negative clock is clock 0.
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, -5), 0.25);
}

TEST(LearningRateScheduleTest, StepDecay) {
  const auto s =
      FromJson(R"({"step_decay": {"step_clocks": 10, "gamma": 0.5}})");
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 0), 1.0);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 9), 1.0);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 10), 0.5);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 19), 0.5);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 25), 0.25);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 30), 0.125);
}

TEST(LearningRateScheduleTest, ExponentialDecay) {
  const auto s = FromJson(R"({"exponential_decay": {"decay_rate": 0.01}})");
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 0), 1.0);
  // e^-1 and e^-0.5, to 11 digits (within 1e-7: the spec's 0.01 is a
  // float, 0.0099999998).
  EXPECT_NEAR(ScheduleFactor(s, 100), 0.36787944117, 1e-7);
  EXPECT_NEAR(ScheduleFactor(s, 50), 0.60653065971, 1e-7);
}

TEST(LearningRateScheduleTest, CosineAnnealsToTheFloorAndStaysThere) {
  const auto s =
      FromJson(R"({"cosine": {"decay_clocks": 100, "min_factor": 0.1}})");
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 0), 1.0);
  // 0.1 + 0.9 * (1 + cos(pi / 4)) / 2 = 0.1 + 0.9 * 0.85355339059.
  // (Within 1e-7: min_factor 0.1 is a float.)
  EXPECT_NEAR(ScheduleFactor(s, 25), 0.86819805153, 1e-7);
  EXPECT_NEAR(ScheduleFactor(s, 50), 0.55, 1e-7);
  // 0.1 + 0.9 * (1 + cos(3 pi / 4)) / 2 = 0.1 + 0.9 * 0.14644660941.
  EXPECT_NEAR(ScheduleFactor(s, 75), 0.23180194847, 1e-7);
  EXPECT_NEAR(ScheduleFactor(s, 100), 0.1, 1e-7);
  EXPECT_NEAR(ScheduleFactor(s, 5000), 0.1, 1e-7);
}

TEST(LearningRateScheduleTest, CosineWithLinearWarmup) {
  const auto s =
      FromJson(R"({"warmup_clocks": 10, "cosine": {"decay_clocks": 100}})");
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 4), 0.5);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 9), 1.0);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 10), 1.0);  // The cosine's start.
  EXPECT_NEAR(ScheduleFactor(s, 60), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 110), 0.0);
}

TEST(LearningRateScheduleTest, WarmRestartsWithGrowingPeriods) {
  // Periods of 10, 20, 40, 80 clocks starting at 0, 10, 30, 70.
  const auto s = FromJson(
      R"({"cosine_restarts": {"period_clocks": 10, "period_multiplier": 2}})");
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 0), 1.0);
  EXPECT_NEAR(ScheduleFactor(s, 5), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 10), 1.0);
  EXPECT_NEAR(ScheduleFactor(s, 20), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 30), 1.0);
  EXPECT_NEAR(ScheduleFactor(s, 50), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 70), 1.0);
  // Just before a restart: (1 + cos(pi 39/40)) / 2.
  EXPECT_NEAR(ScheduleFactor(s, 69), 0.5 * (1 + std::cos(M_PI * 39 / 40)),
              1e-12);
  // A huge clock ends (periods stop growing before they overflow).
  const double far = ScheduleFactor(s, int64_t{1} << 62);
  EXPECT_GE(far, 0.0);
  EXPECT_LE(far, 1.0);
}

TEST(LearningRateScheduleTest, WarmRestartsOfEqualPeriodsWithAFloor) {
  const auto s = FromJson(
      R"({"cosine_restarts": {"period_clocks": 10, "min_factor": 0.2}})");
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 0), 1.0);
  EXPECT_NEAR(ScheduleFactor(s, 25), 0.6, 1e-7);  // 0.2 + 0.8 / 2.
  EXPECT_DOUBLE_EQ(ScheduleFactor(s, 1000), 1.0);
}

TEST(LearningRateScheduleTest, RateIsTheBaseRateOfAnyKindTimesTheFactor) {
  auto spec = JobSpecFromJson(R"({"optimizer": {
      "adamw": {"learning_rate": 0.002},
      "schedule": {"cosine": {"decay_clocks": 100}}}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FLOAT_EQ(BaseLearningRate(spec->optimizer()), 0.002f);
  EXPECT_FLOAT_EQ(LearningRateAt(spec->optimizer(), 50), 0.001f);
  for (const char* kind :
       {"sgd", "adam", "adamw", "rmsprop", "adagrad", "lamb"}) {
    auto other = JobSpecFromJson(std::string(R"({"optimizer": {")") + kind +
                                 R"(": {"learning_rate": 0.25}}})");
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_FLOAT_EQ(LearningRateAt(other->optimizer(), 3), 0.25f) << kind;
  }
  EXPECT_EQ(BaseLearningRate(v1::OptimizerSpec()), 0.0f);
}

TEST(LearningRateScheduleTest, InvalidSchedulesNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"warmup_clocks": -1})", "optimizer.schedule.warmup_clocks: "},
      {R"({"warmup_clocks": 1099511627777})",
       "optimizer.schedule.warmup_clocks: "},
      {R"({"step_decay": {"gamma": 0.5}})",
       "optimizer.schedule.step_decay.step_clocks: "},
      {R"({"step_decay": {"step_clocks": 5}})",
       "optimizer.schedule.step_decay.gamma: "},
      {R"({"step_decay": {"step_clocks": 5, "gamma": 1.5}})",
       "optimizer.schedule.step_decay.gamma: "},
      {R"({"exponential_decay": {"decay_rate": -0.1}})",
       "optimizer.schedule.exponential_decay.decay_rate: "},
      {R"({"cosine": {}})", "optimizer.schedule.cosine.decay_clocks: "},
      {R"({"cosine": {"decay_clocks": 10, "min_factor": 1.5}})",
       "optimizer.schedule.cosine.min_factor: "},
      {R"({"cosine_restarts": {"period_clocks": 0}})",
       "optimizer.schedule.cosine_restarts.period_clocks: "},
      {R"({"cosine_restarts": {"period_clocks": 10, "period_multiplier": 17}})",
       "optimizer.schedule.cosine_restarts.period_multiplier: "},
      {R"({"cosine_restarts": {"period_clocks": 10, "period_multiplier": -1}})",
       "optimizer.schedule.cosine_restarts.period_multiplier: "},
      {R"({"cosine_restarts": {"period_clocks": 10, "min_factor": -0.5}})",
       "optimizer.schedule.cosine_restarts.min_factor: "},
  };
  for (const auto& [json, field] : cases) {
    const absl::Status status = ValidateSchedule(FromJson(json));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(status.message()), StartsWith(field)) << json;
  }
  EXPECT_TRUE(ValidateSchedule(FromJson(R"({"warmup_clocks": 100,
      "cosine_restarts": {"period_clocks": 10, "period_multiplier": 16,
      "min_factor": 1}})"))
                  .ok());
}

// A whole spec with a bad schedule, or a bad new optimizer, is refused at
// submit naming the field; good ones pass.
TEST(LearningRateScheduleTest, ValidateJobSpecNamesScheduleAndOptimizerFields) {
  v1::JobSpec spec = testing::TinySpec(4, 3);
  spec.set_num_workers(1);
  spec.set_num_servers(1);
  spec.mutable_optimizer()->mutable_lamb()->set_learning_rate(0.01f);
  spec.mutable_optimizer()->mutable_schedule()->set_warmup_clocks(5);
  spec.mutable_optimizer()
      ->mutable_schedule()
      ->mutable_cosine()
      ->set_decay_clocks(100);
  ApplyJobSpecDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_FLOAT_EQ(spec.optimizer().lamb().epsilon(), 1e-6f);

  v1::JobSpec bad = spec;
  bad.mutable_optimizer()
      ->mutable_schedule()
      ->mutable_cosine()
      ->set_decay_clocks(0);
  absl::Status status = ValidateJobSpec(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("optimizer.schedule.cosine.decay_clocks: "));

  const std::vector<std::pair<std::string, std::string>> optimizers = {
      {R"({"adamw": {"learning_rate": 0}})", "optimizer.adamw.learning_rate: "},
      {R"({"adamw": {"learning_rate": 0.1, "beta2": 1}})",
       "optimizer.adamw.beta2: "},
      {R"({"rmsprop": {"learning_rate": 0.1, "alpha": 1}})",
       "optimizer.rmsprop.alpha: "},
      {R"({"rmsprop": {"learning_rate": 0.1, "momentum": -0.1}})",
       "optimizer.rmsprop.momentum: "},
      {R"({"adagrad": {"learning_rate": 0.1, "epsilon": -1}})",
       "optimizer.adagrad.epsilon: "},
      {R"({"adagrad": {"learning_rate": 0.1,
                       "initial_accumulator_value": -1}})",
       "optimizer.adagrad.initial_accumulator_value: "},
      {R"({"lamb": {"learning_rate": 0.1, "weight_decay": -0.01}})",
       "optimizer.lamb.weight_decay: "},
      {R"({})", "optimizer: set one of"},
  };
  for (const auto& [json, field] : optimizers) {
    auto parsed = JobSpecFromJson("{\"optimizer\": " + json + "}");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    v1::JobSpec copy = spec;
    *copy.mutable_optimizer() = parsed->optimizer();
    ApplyJobSpecDefaults(&copy);
    status = ValidateJobSpec(copy);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(status.message()), StartsWith(field)) << json;
  }
}

}  // namespace
}  // namespace ps

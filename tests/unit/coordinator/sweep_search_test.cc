// Grid and random search, the median stopping rule, setting parameters by
// path and the sweep's validation (coordinator/sweep_*.h,
// coordinator/median_stopping.h).
#include "coordinator/sweep/sweep_search.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/sweep/median_stopping.h"
#include "coordinator/sweep/sweep_params.h"
#include "coordinator/sweep/sweep_validation.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/job_manager_fixture.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

v1::SweepParameter Values(const std::string& path, std::vector<double> v) {
  v1::SweepParameter p;
  p.set_path(path);
  for (double x : v) p.add_values(x);
  return p;
}

v1::SweepParameter Range(const std::string& path, double lo, double hi,
                         bool log, int points = 0) {
  v1::SweepParameter p;
  p.set_path(path);
  p.mutable_range()->set_min(lo);
  p.mutable_range()->set_max(hi);
  p.mutable_range()->set_log_scale(log);
  p.mutable_range()->set_grid_points(points);
  return p;
}

// A sweep over the tiny SGD job of the coordinator tests.
v1::SweepSpec Sweep() {
  v1::SweepSpec spec;
  spec.set_name("s");
  *spec.mutable_base() = testing::TinyJobSpec(1, 1);
  spec.mutable_base()->set_epochs(3);
  spec.mutable_grid();
  return spec;
}

std::vector<SweepFieldKind> Kinds(const v1::SweepSpec& spec) {
  std::vector<SweepFieldKind> kinds;
  for (const auto& p : spec.parameters()) {
    kinds.push_back(*ResolveSweepPath("p", p.path()));
  }
  return kinds;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(SweepSearchTest, GridIsEveryCombinationFirstParameterSlowest) {
  v1::SweepSpec spec = Sweep();
  *spec.add_parameters() = Values("optimizer.sgd.learning_rate", {0.1, 0.2});
  *spec.add_parameters() = Values("batch_size", {8, 16, 32});
  auto trials = GenerateTrials(spec, Kinds(spec));
  ASSERT_THAT(trials, SizeIs(6));
  EXPECT_EQ(GridSize(spec), 6);
  EXPECT_EQ(trials[0][0].number(), 0.1);
  EXPECT_EQ(trials[0][1].number(), 8);
  EXPECT_EQ(trials[1][1].number(), 16);
  EXPECT_EQ(trials[3][0].number(), 0.2);
  EXPECT_EQ(trials[3][1].number(), 8);
  EXPECT_EQ(trials[5][1].number(), 32);
  // The budget takes the first combinations.
  spec.set_max_trials(4);
  EXPECT_THAT(GenerateTrials(spec, Kinds(spec)), SizeIs(4));
}

TEST(SweepSearchTest, GridOverALogRangeIsGeometricAndEndsAtMax) {
  v1::SweepSpec spec = Sweep();
  *spec.add_parameters() =
      Range("optimizer.sgd.learning_rate", 1e-4, 1e-1, true, 4);
  auto trials = GenerateTrials(spec, Kinds(spec));
  ASSERT_THAT(trials, SizeIs(4));
  EXPECT_NEAR(trials[0][0].number(), 1e-4, 1e-12);
  EXPECT_NEAR(trials[1][0].number(), 1e-3, 1e-10);
  EXPECT_NEAR(trials[2][0].number(), 1e-2, 1e-9);
  EXPECT_EQ(trials[3][0].number(), 1e-1);
}

TEST(SweepSearchTest, RandomIsDeterministicBySeedAndWithinRange) {
  v1::SweepSpec spec = Sweep();
  spec.mutable_random()->set_seed(42);
  spec.set_max_trials(50);
  *spec.add_parameters() =
      Range("optimizer.sgd.learning_rate", 1e-4, 1e-1, true);
  *spec.add_parameters() = Range("batch_size", 8, 64, false);
  *spec.add_parameters() = Values("optimizer.sgd.momentum", {0, 0.9});
  auto a = GenerateTrials(spec, Kinds(spec));
  auto b = GenerateTrials(spec, Kinds(spec));
  ASSERT_THAT(a, SizeIs(50));
  int small = 0;
  std::set<double> momenta;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_THAT(a[i], SizeIs(3));
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(a[i][j].number(), b[i][j].number()) << i;
    }
    const double lr = a[i][0].number();
    EXPECT_GE(lr, 1e-4);
    EXPECT_LE(lr, 1e-1);
    small += lr < std::sqrt(1e-4 * 1e-1);
    // Integer fields are rounded.
    EXPECT_EQ(a[i][1].number(), std::round(a[i][1].number()));
    EXPECT_GE(a[i][1].number(), 8);
    EXPECT_LE(a[i][1].number(), 64);
    momenta.insert(a[i][2].number());
  }
  // Log-uniform: about half below the geometric mean (uniform would put
  // about 3 % there).
  EXPECT_GT(small, 12);
  EXPECT_EQ(momenta, (std::set<double>{0, 0.9}));
  spec.mutable_random()->set_seed(43);
  EXPECT_NE(GenerateTrials(spec, Kinds(spec))[0][0].number(), a[0][0].number());
}

TEST(MedianStoppingTest, StopsOnlyBelowTheMedianAfterTheGrace) {
  const std::vector<AccuracyCurve> others = {{0.5, 0.6}, {0.7, 0.8}, {0.9}};
  // Epoch 1: the median of 0.5, 0.7, 0.9 is 0.7.
  EXPECT_TRUE(ShouldStopTrial({0.6}, others, 1, 2));
  EXPECT_FALSE(ShouldStopTrial({0.7}, others, 1, 2));
  // Within the grace.
  EXPECT_FALSE(ShouldStopTrial({0.6}, others, 2, 2));
  // Epoch 2: two others reached it, median (0.6 + 0.8) / 2 = 0.7; the best
  // so far counts.
  EXPECT_TRUE(ShouldStopTrial({0.65, 0.69}, others, 1, 2));
  EXPECT_FALSE(ShouldStopTrial({0.75, 0.6}, others, 1, 2));
  // Too few others at that epoch.
  EXPECT_FALSE(ShouldStopTrial({0.1, 0.1}, others, 1, 3));
  EXPECT_FALSE(ShouldStopTrial({}, others, 1, 1));
  EXPECT_FALSE(ShouldStopTrial({0.1}, {}, 1, 1));
}

TEST(SweepParamsTest, SetsNestedFieldsAndSelectsOneofMembers) {
  v1::JobSpec spec = testing::TinyJobSpec(1, 1);
  ASSERT_TRUE(spec.optimizer().has_sgd());
  v1::SweepAssignment a;
  a.set_path("optimizer.adamw.learning_rate");
  a.set_number(0.002);
  ASSERT_TRUE(SetSweepValue("p", a, &spec).ok());
  EXPECT_TRUE(spec.optimizer().has_adamw());
  EXPECT_FALSE(spec.optimizer().has_sgd());
  EXPECT_FLOAT_EQ(spec.optimizer().adamw().learning_rate(), 0.002f);
  a.set_path("optimizer.schedule.cosine.decay_clocks");
  a.set_number(900);
  ASSERT_TRUE(SetSweepValue("p", a, &spec).ok());
  EXPECT_EQ(spec.optimizer().schedule().cosine().decay_clocks(), 900);
  a.set_path("consistency.model");
  a.set_text("SSP");
  ASSERT_TRUE(SetSweepValue("p", a, &spec).ok());
  EXPECT_EQ(spec.consistency().model(), v1::ConsistencySpec::SSP);
  a.set_path("optimizer");
  a.set_text(R"({"sgd": {"learning_rate": 0.05, "momentum": 0.9}})");
  ASSERT_TRUE(SetSweepValue("p", a, &spec).ok());
  EXPECT_TRUE(spec.optimizer().has_sgd());
  EXPECT_FLOAT_EQ(spec.optimizer().sgd().momentum(), 0.9f);
}

TEST(SweepParamsTest, RefusalsNameTheFieldAndWhy) {
  v1::JobSpec spec = testing::TinyJobSpec(1, 1);
  v1::SweepAssignment a;
  a.set_number(1);
  a.set_path("optimizer.adamw.learnin_rate");
  absl::Status s = SetSweepValue("parameters[2]", a, &spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), StartsWith("parameters[2]: unknown field "
                                     "\"learnin_rate\" in ps.v1.AdamWOptions"));
  a.set_path("batch_size.x");
  EXPECT_THAT(Message(SetSweepValue("p", a, &spec)),
              HasSubstr("not a message"));
  a.set_path("model.hidden_layers");
  EXPECT_THAT(Message(SetSweepValue("p", a, &spec)), HasSubstr("repeated"));
  a.set_path("batch_size");
  a.set_number(8.5);
  EXPECT_THAT(Message(SetSweepValue("p", a, &spec)),
              HasSubstr("integer field"));
  a.set_text("big");
  EXPECT_THAT(Message(SetSweepValue("p", a, &spec)), HasSubstr("number"));
  a.set_path("consistency.model");
  a.set_text("SOMETIMES");
  EXPECT_THAT(Message(SetSweepValue("p", a, &spec)),
              HasSubstr("not a value of ps.v1.ConsistencySpec.Model"));
  a.set_path("optimizer");
  a.set_text(R"({"sgdd": {}})");
  EXPECT_THAT(Message(SetSweepValue("p", a, &spec)),
              HasSubstr("not valid JSON for ps.v1.OptimizerSpec"));
}

// Every refusal of ValidateSweepSpec starts with the field's path.
TEST(SweepValidationTest, RefusalsNameTheField) {
  const JobLimits limits;
  struct Case {
    std::function<void(v1::SweepSpec&)> change;
    std::string prefix;
  };
  const std::vector<Case> cases = {
      {[](auto& s) { s.clear_parameters(); }, "parameters: "},
      {[](auto& s) { s.mutable_parameters(0)->set_path("optimizer.sgd.lr"); },
       "parameters[0].path: unknown field \"lr\""},
      {[](auto& s) { s.mutable_parameters(0)->clear_values(); },
       "parameters[0]: needs exactly one"},
      {[](auto& s) { s.mutable_parameters(0)->add_choices("x"); },
       "parameters[0]: needs exactly one"},
      {[](auto& s) {
         *s.mutable_parameters(0) =
             Range("optimizer.sgd.learning_rate", 0, 1, true, 3);
       },
       "parameters[0].range.min: must be > 0 with log_scale"},
      {[](auto& s) {
         *s.mutable_parameters(0) =
             Range("optimizer.sgd.learning_rate", 1, 0.5, false, 3);
       },
       "parameters[0].range.max: must be > min"},
      {[](auto& s) {
         *s.mutable_parameters(0) =
             Range("optimizer.sgd.learning_rate", 0.1, 0.5, false, 0);
       },
       "parameters[0].range.grid_points: "},
      {[](auto& s) { *s.add_parameters() = s.parameters(0); },
       "parameters[1].path: \"optimizer.sgd.learning_rate\" is swept twice"},
      {[](auto& s) { s.clear_grid(); }, "search: "},
      {[](auto& s) {
         s.mutable_random();
         s.set_max_trials(0);
       },
       "max_trials: a random search needs a budget"},
      {[](auto& s) { s.set_max_trials(1001); }, "max_trials: "},
      {[](auto& s) { s.set_max_concurrent_trials(65); },
       "max_concurrent_trials: "},
      {[](auto& s) {
         s.mutable_early_stopping()->mutable_median()->set_grace_epochs(4);
       },
       "early_stopping.median.grace_epochs: "},
      {[](auto& s) { s.set_name("a\nb"); }, "name: "},
      {[](auto& s) { s.clear_base(); }, "base: "},
      // A trial SubmitJob would refuse: the job spec's own message.
      {[](auto& s) { s.mutable_parameters(0)->set_values(1, -1); },
       "trials[1] (optimizer.sgd.learning_rate=-1): "
       "optimizer.sgd.learning_rate: "},
      {[](auto& s) { *s.mutable_parameters(0) = Values("batch_size", {0}); },
       "trials[0] (batch_size=0): batch_size: "},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::SweepSpec spec = Sweep();
    *spec.add_parameters() = Values("optimizer.sgd.learning_rate", {0.1, 0.2});
    cases[i].change(spec);
    ApplySweepDefaults(&spec);
    auto trials = ValidateSweepSpec(spec, limits);
    EXPECT_EQ(trials.status().code(), absl::StatusCode::kInvalidArgument)
        << "case " << i;
    EXPECT_THAT(Message(trials.status()), StartsWith(cases[i].prefix))
        << "case " << i;
  }
}

TEST(SweepValidationTest, AcceptsAValidSweepAndFillsDefaults) {
  v1::SweepSpec spec = Sweep();
  *spec.add_parameters() = Values("optimizer.sgd.learning_rate", {0.1, 0.2});
  spec.mutable_early_stopping()->mutable_median();
  ApplySweepDefaults(&spec);
  EXPECT_EQ(spec.max_concurrent_trials(), 1);
  EXPECT_EQ(spec.early_stopping().median().grace_epochs(), 1);
  EXPECT_EQ(spec.early_stopping().median().min_trials(), 2);
  auto trials = ValidateSweepSpec(spec, JobLimits());
  ASSERT_TRUE(trials.ok()) << trials.status();
  EXPECT_THAT(*trials, SizeIs(2));
  auto job = TrialJobSpec(spec, (*trials)[1], TrialJobName("sweep-000007", 1));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "sweep-000007-trial-1");
  EXPECT_FLOAT_EQ(job->optimizer().sgd().learning_rate(), 0.2f);
}

// Every sweep deploy/ ships parses (unknown fields are errors) and passes
// the coordinator's checks, trials included.
TEST(SweepValidationTest, ShippedSweepsAreValid) {
  const std::filesystem::path dir = testing::SourcePath("deploy/sweeps");
  if (!std::filesystem::is_directory(dir)) {
    GTEST_SKIP() << "no " << dir << " (set PS_SOURCE_DIR)";
  }
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    v1::SweepSpec spec;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(text.str(), &spec, options)
            .ok())
        << entry.path();
    ApplySweepDefaults(&spec);
    auto trials = ValidateSweepSpec(spec, JobLimits());
    EXPECT_TRUE(trials.ok()) << entry.path() << ": " << trials.status();
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace ps

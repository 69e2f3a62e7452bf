// Gradient accumulation under BSP equals one big batch: two real workers
// (Trainer) with batch b and accumulation_steps k on two real servers
// against one in-process computation with batch 2kb made of both workers'
// k micro-batches in the same order, for several clocks, with the learning
// rate following a schedule (the reference applies LearningRateAt of each
// step, so the servers' schedule is checked end to end too).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/idx_reader.h"
#include "common/job_spec.h"
#include "common/learning_rate_schedule.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"
#include "gtest/gtest.h"
#include "server/optimizer.h"
#include "server/parameter_server.h"
#include "tests/testing/bsp_training.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/reference_training.h"
#include "worker/batcher.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"
#include "worker/parameter_client.h"
#include "worker/trainer.h"

namespace ps {
namespace {

constexpr int kMicroBatch = 8;
constexpr int kAccumulation = 2;
constexpr int kSteps = 12;
constexpr int kWorkers = 2;
constexpr int kPerStep = kMicroBatch * kAccumulation;  // Samples per push.

v1::JobSpec Spec(const v1::OptimizerSpec& optimizer) {
  // Each worker owns kPerStep * kSteps samples: one epoch is kSteps clocks.
  v1::JobSpec spec =
      testing::FashionMnistMlpJob("accumulation-equivalence", 32,
                                  int64_t{kWorkers} * kPerStep * kSteps, 200);
  spec.set_batch_size(kMicroBatch);
  spec.set_accumulation_steps(kAccumulation);
  spec.set_seed(11);
  *spec.mutable_optimizer() = optimizer;
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(kWorkers);
  spec.set_num_servers(2);
  spec.set_block_elems(10000);
  ApplyJobSpecDefaults(&spec);
  PS_CHECK(ValidateJobSpec(spec).ok());
  return spec;
}

// Parameters after kSteps clocks of two Trainers under BSP on real servers.
std::vector<std::vector<float>> TrainDistributed(const v1::JobSpec& spec) {
  return testing::TrainOnServers(spec, "job-accumulation", kSteps);
}

// The same clocks in one process: one batch of 2kb samples, both workers'
// k micro-batches in order, at the schedule's rate of each clock.
std::vector<std::vector<float>> TrainSingleProcess(const v1::JobSpec& spec) {
  return testing::TrainOneBatchPerClock(spec, kWorkers, kPerStep, kSteps,
                                        /*scheduled=*/true);
}

class AccumulationEquivalenceTest
    : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!testing::HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST not installed";
    }
  }
};

// Tolerance: as in bsp_equivalence_test.cc, the computations differ only in
// float32 summation order (here also the micro-batches' sums), a few ulps of
// each gradient value per step; 1e-5 is far above that and far below the
// parameters' own change (checked).
constexpr double kTolerance = 1e-5;

TEST_P(AccumulationEquivalenceTest, MicroBatchesUnderBspEqualOneBigBatch) {
  v1::OptimizerSpec optimizer;
  if (std::string(GetParam()) == "adamw_cosine") {
    optimizer.mutable_adamw()->set_learning_rate(0.002f);
    optimizer.mutable_adamw()->set_weight_decay(0.01f);
    optimizer.mutable_schedule()->set_warmup_clocks(3);
    optimizer.mutable_schedule()->mutable_cosine()->set_decay_clocks(kSteps);
  } else {
    optimizer.mutable_sgd()->set_learning_rate(0.1f);
    optimizer.mutable_sgd()->set_momentum(0.9f);
    auto* decay = optimizer.mutable_schedule()->mutable_step_decay();
    decay->set_step_clocks(4);
    decay->set_gamma(0.5f);
  }
  const v1::JobSpec spec = Spec(optimizer);
  const auto distributed = TrainDistributed(spec);
  const auto single = TrainSingleProcess(spec);
  const auto initial = testing::InitialParameters(spec);
  ASSERT_EQ(distributed.size(), single.size());
  double difference = 0, moved = 0;
  for (size_t t = 0; t < single.size(); ++t) {
    ASSERT_EQ(distributed[t].size(), single[t].size());
    for (size_t i = 0; i < single[t].size(); ++i) {
      difference = std::max<double>(
          difference, std::fabs(distributed[t][i] - single[t][i]));
      moved = std::max<double>(moved, std::fabs(single[t][i] - initial[t][i]));
    }
  }
  std::printf("%s: max |distributed - single| = %.3g, max change %.3g\n",
              GetParam(), difference, moved);
  EXPECT_GT(moved, 1000 * kTolerance);
  EXPECT_LE(difference, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, AccumulationEquivalenceTest,
                         ::testing::Values("sgd_step_decay", "adamw_cosine"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ps

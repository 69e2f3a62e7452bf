// The pipelined BSP step (ConsistencySpec.pipeline_parts; docs/consistency.md,
// "The pipelined step") over real gRPC: two Trainers and two in-process
// servers, the push in parts and the pull block by block, give bit for bit
// the parameters of the whole-step push. The server sums a block's pushes
// in any order (two addends: exact either way) and applies the mean through
// the same optimizer code, so nothing but the timing may differ.
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "tests/testing/bsp_training.h"
#include "tests/testing/fashion_mnist.h"

namespace ps {
namespace {

constexpr int kBatch = 16;
constexpr int kSteps = 12;
constexpr int kWorkers = 2;

v1::JobSpec Spec(int parts, bool adam) {
  v1::JobSpec spec = testing::FashionMnistMlpJob(
      "pipelined-step", 32, kWorkers * kBatch * kSteps, 200);
  spec.set_batch_size(kBatch);
  spec.set_seed(5);
  if (adam) {
    spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.001f);
  } else {
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05f);
    spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9f);
  }
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.mutable_consistency()->set_pipeline_parts(parts);
  spec.set_num_workers(kWorkers);
  spec.set_num_servers(2);
  spec.set_block_elems(4000);  // Many blocks per weight, on both servers.
  ApplyJobSpecDefaults(&spec);
  return spec;
}

class PipelinedStepTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PipelinedStepTest, EqualsTheWholeStepPushBitForBit) {
  const bool adam = std::string(GetParam()) == "adam";
  const v1::JobSpec whole_spec = Spec(0, adam);
  ASSERT_TRUE(ValidateJobSpec(whole_spec).ok());
  const auto whole = testing::TrainOnServers(whole_spec, "job-whole", kSteps);
  const std::vector<std::vector<float>> initial =
      testing::InitialParameters(whole_spec);
  ASSERT_NE(whole, initial);  // Training moved them.
  for (const int parts : {2, 5}) {
    SCOPED_TRACE(parts);
    const v1::JobSpec spec = Spec(parts, adam);
    ASSERT_TRUE(ValidateJobSpec(spec).ok());
    const auto pipelined = testing::TrainOnServers(spec, "job-parts", kSteps);
    ASSERT_EQ(pipelined.size(), whole.size());
    for (size_t t = 0; t < whole.size(); ++t) {
      EXPECT_EQ(pipelined[t], whole[t]) << "tensor " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, PipelinedStepTest,
                         ::testing::Values("sgd", "adam"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ps

// Job specs from hostile clients: the hard limits of ValidateJobSpec, the
// non-finite gradient policy, ids, and model sizes.
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::JobSpec Valid() {
  v1::JobSpec spec = testing::TinySpec(784, 10);
  spec.mutable_model()->set_kind(v1::ModelSpec::MLP);
  spec.mutable_model()->add_hidden_layers(64);
  spec.set_batch_size(32);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

// Expects `spec` to be refused with a message starting with `field`.
void ExpectRefused(const v1::JobSpec& spec, const std::string& field) {
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(std::string(s.message()), StartsWith(field + ":"));
}

TEST(JobSpecLimitsTest, NonFinitePolicyDefaultsToRefuse) {
  v1::JobSpec spec = Valid();
  EXPECT_EQ(spec.non_finite_gradients(), v1::NON_FINITE_REFUSE);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_non_finite_gradients(v1::NON_FINITE_DROP);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_non_finite_gradients(static_cast<v1::NonFinitePolicy>(7));
  ExpectRefused(spec, "non_finite_gradients");
  auto parsed =
      JobSpecFromJson(R"({"non_finite_gradients": "NON_FINITE_DROP"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->non_finite_gradients(), v1::NON_FINITE_DROP);
}

TEST(JobSpecLimitsTest, NodeCountsAreBounded) {
  v1::JobSpec spec = Valid();
  spec.set_num_workers(kMaxNodesPerJob);
  spec.set_num_servers(kMaxNodesPerJob);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_num_workers(kMaxNodesPerJob + 1);
  ExpectRefused(spec, "num_workers");
  spec = Valid();
  spec.set_num_servers(std::numeric_limits<int32_t>::max());
  ExpectRefused(spec, "num_servers");
}

TEST(JobSpecLimitsTest, BatchSizeAndPathsAreBounded) {
  v1::JobSpec spec = Valid();
  spec.set_batch_size(kMaxBatchSize + 1);
  ExpectRefused(spec, "batch_size");
  spec = Valid();
  spec.mutable_dataset()->set_test_images(std::string(kMaxPathBytes + 1, 'p'));
  ExpectRefused(spec, "dataset.test_images");
}

TEST(JobSpecLimitsTest, BlockCountIsBounded) {
  v1::JobSpec spec = Valid();
  // 784 x 64 + 64 + 64 x 10 + 10 = 50890 values: fine in blocks of one.
  spec.set_block_elems(1);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.mutable_model()->set_hidden_layers(0, 128);  // 101770 blocks.
  ExpectRefused(spec, "block_elems");
  // Huge dimensions do not overflow the count, and a model no block size
  // could hold blames its widest layer, not block_elems.
  spec = Valid();
  spec.mutable_model()->set_input_dim(std::numeric_limits<int32_t>::max());
  spec.mutable_model()->set_hidden_layers(0,
                                          std::numeric_limits<int32_t>::max());
  ExpectRefused(spec, "model.hidden_layers[0]");
}

TEST(JobSpecLimitsTest, AHugeLayerBlamesTheLayerNotTheBlockSize) {
  v1::JobSpec spec = Valid();
  spec.mutable_model()->add_hidden_layers(32);
  spec.mutable_model()->set_hidden_layers(1, 1 << 30);
  ExpectRefused(spec, "model.hidden_layers[1]");
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_THAT(std::string(s.message()), HasSubstr("parameters"));
  // Many huge layers: the sum of their sizes does not overflow.
  spec = Valid();
  for (int i = 0; i < 8; ++i) {
    spec.mutable_model()->add_hidden_layers(
        std::numeric_limits<int32_t>::max());
  }
  // (hidden_layers[0] is Valid()'s 64.)
  ExpectRefused(spec, "model.hidden_layers[1]");
  auto tensors = ModelTensors(spec.model());
  ASSERT_TRUE(tensors.ok());
  EXPECT_GT(ModelBytes(*tensors), int64_t{1} << 60);
}

TEST(JobSpecLimitsTest, UnknownActivationIsRefusedAtSubmit) {
  v1::JobSpec spec = Valid();
  for (v1::Activation a : {v1::RELU, v1::TANH, v1::SIGMOID}) {
    spec.mutable_model()->set_activation(a);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << a;
  }
  spec.mutable_model()->set_activation(static_cast<v1::Activation>(99));
  ExpectRefused(spec, "model.activation");
  auto parsed = JobSpecFromJson(R"({"model": {"activation": 99}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  spec.mutable_model()->set_activation(parsed->model().activation());
  ExpectRefused(spec, "model.activation");
}

TEST(JobSpecLimitsTest, DataPathsWithNulOrControlBytesAreRefused) {
  v1::JobSpec spec = Valid();
  spec.mutable_dataset()->set_train_images(std::string("/data/ok\0/etc", 13));
  ExpectRefused(spec, "dataset.train_images");
  spec = Valid();
  spec.mutable_dataset()->set_test_labels("labels\nINFO forged");
  ExpectRefused(spec, "dataset.test_labels");
}

TEST(JobSpecLimitsTest, EveryFloatMustBeFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    v1::JobSpec spec = Valid();
    spec.mutable_optimizer()->mutable_sgd()->set_weight_decay(bad);
    ExpectRefused(spec, "optimizer.sgd.weight_decay");
    spec = Valid();
    spec.mutable_optimizer()->mutable_sgd()->set_momentum(bad);
    ExpectRefused(spec, "optimizer.sgd.momentum");
    spec = Valid();
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(bad);
    ExpectRefused(spec, "optimizer.sgd.learning_rate");
    spec = Valid();
    auto* adam = spec.mutable_optimizer()->mutable_adam();
    adam->set_learning_rate(0.01f);
    ApplyJobSpecDefaults(&spec);
    EXPECT_TRUE(ValidateJobSpec(spec).ok());
    const std::pair<void (v1::AdamOptions::*)(float), const char*> fields[] = {
        {&v1::AdamOptions::set_learning_rate, "learning_rate"},
        {&v1::AdamOptions::set_beta1, "beta1"},
        {&v1::AdamOptions::set_beta2, "beta2"},
        {&v1::AdamOptions::set_epsilon, "epsilon"},
        {&v1::AdamOptions::set_weight_decay, "weight_decay"}};
    for (const auto& [set, name] : fields) {
      v1::JobSpec copy = spec;
      (copy.mutable_optimizer()->mutable_adam()->*set)(bad);
      ExpectRefused(copy, std::string("optimizer.adam.") + name);
    }
    spec = Valid();
    spec.mutable_mixed_precision()->set_compute(v1::FP16);
    ApplyJobSpecDefaults(&spec);
    EXPECT_TRUE(ValidateJobSpec(spec).ok());
    spec.mutable_mixed_precision()->set_initial_loss_scale(bad);
    ExpectRefused(spec, "mixed_precision.initial_loss_scale");
  }
  // As JSON: "Infinity" is how a client would send it.
  auto parsed = JobSpecFromJson(
      R"({"optimizer": {"adam": {"learning_rate": 0.01,
                                  "weight_decay": "Infinity"}}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  v1::JobSpec spec = Valid();
  *spec.mutable_optimizer() = parsed->optimizer();
  ApplyJobSpecDefaults(&spec);
  ExpectRefused(spec, "optimizer.adam.weight_decay");
}

TEST(JobSpecLimitsTest, NameWithControlCharactersIsRefused) {
  v1::JobSpec spec = Valid();
  spec.set_name("mnist run 3 (tanh) - ok");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  for (const char* bad : {"a\nINFO job-000001 cancelled", "a\rb", "a\x1b[31mb",
                          "tab\there", "del\x7f"}) {
    spec.set_name(bad);
    ExpectRefused(spec, "name");
  }
}

TEST(JobSpecLimitsTest, MissingModelSaysRequired) {
  v1::JobSpec spec = Valid();
  spec.clear_model();
  ApplyJobSpecDefaults(&spec);
  EXPECT_FALSE(spec.has_model());
  ExpectRefused(spec, "model");
  EXPECT_EQ(ValidateJobSpec(spec).message(), "model: required");
}

TEST(JobSpecLimitsTest, ModelBytesCountsEveryParameter) {
  auto tensors = ModelTensors(Valid().model());
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(ModelBytes(*tensors), 4 * (784 * 64 + 64 + 64 * 10 + 10));
}

TEST(ValidateIdTest, AcceptsGeneratedIdsAndRefusesOthers) {
  EXPECT_TRUE(ValidateId("job_id", "job-000001").ok());
  EXPECT_TRUE(ValidateId("node_id", "worker-7f3a00001").ok());
  EXPECT_TRUE(ValidateId("job_id", std::string(kMaxIdBytes, 'a')).ok());
  for (const std::string& bad :
       {std::string(), std::string(kMaxIdBytes + 1, 'a'), std::string("job 1"),
        std::string("job/../1"), std::string("job\n1"),
        std::string("job\0001", 5), std::string("j\xc3\xa9")}) {
    absl::Status s = ValidateId("job_id", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), StartsWith("job_id:"));
  }
}

}  // namespace
}  // namespace ps

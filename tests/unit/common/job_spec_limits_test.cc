// Job specs from hostile clients: the hard limits of ValidateJobSpec, the
// non-finite gradient policy, ids, and model sizes.
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::StartsWith;

v1::JobSpec Valid() {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind(v1::ModelSpec::MLP);
  spec.mutable_model()->set_input_dim(784);
  spec.mutable_model()->set_num_classes(10);
  spec.mutable_model()->add_hidden_layers(64);
  auto* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::IDX);
  d->set_train_images("a");
  d->set_train_labels("b");
  d->set_test_images("c");
  d->set_test_labels("d");
  spec.set_epochs(1);
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
  // Huge dimensions do not overflow the count.
  spec = Valid();
  spec.mutable_model()->set_input_dim(std::numeric_limits<int32_t>::max());
  spec.mutable_model()->set_hidden_layers(0,
                                          std::numeric_limits<int32_t>::max());
  ExpectRefused(spec, "block_elems");
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

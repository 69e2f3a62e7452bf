// Validation at submit of local SGD (JobSpec.local_sgd) and the non-IID
// partition (DatasetSpec.labels_per_worker): INVALID_ARGUMENT naming the
// field.
#include <limits>
#include <string>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Two workers, 3 classes, server SGD lr 1 and local SGD H = 4: FedAvg.
v1::JobSpec Valid() {
  v1::JobSpec spec = testing::TinySpec(4, 3);
  spec.set_num_workers(2);
  spec.set_num_servers(1);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
  spec.mutable_local_sgd()->set_local_steps(4);
  spec.mutable_local_sgd()->mutable_local_optimizer()->set_learning_rate(0.1f);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

void ExpectRefused(const v1::JobSpec& spec, const std::string& field,
                   const std::string& says = "") {
  const absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(std::string(status.message()), StartsWith(field + ": "));
  EXPECT_THAT(std::string(status.message()), HasSubstr(says));
}

TEST(LocalSgdSpecTest, ValidSpecsPass) {
  v1::JobSpec spec = Valid();
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_local_sgd()->mutable_local_optimizer()->set_momentum(0.9f);
  spec.mutable_local_sgd()->mutable_local_optimizer()->set_weight_decay(1e-4f);
  spec.set_accumulation_steps(2);
  spec.mutable_dataset()->set_labels_per_worker(2);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_local_sgd()->set_local_steps(1);  // H = 1 is still on.
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // Off, with the non-IID partition under plain BSP (the benchmark's
  // baseline) and under SSP.
  spec.clear_local_sgd();
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(LocalSgdSpecTest, LocalStepsAndOptimizerRefusedOutOfRange) {
  v1::JobSpec bad = Valid();
  bad.mutable_local_sgd()->set_local_steps(-1);
  ExpectRefused(bad, "local_sgd.local_steps", "got -1");
  bad.mutable_local_sgd()->set_local_steps(1025);
  ExpectRefused(bad, "local_sgd.local_steps", "[1, 1024]");
  bad.mutable_local_sgd()->set_local_steps(1024);
  bad.set_batch_size(1024);
  bad.set_accumulation_steps(2);  // 2^21 samples a round.
  ExpectRefused(bad, "local_sgd.local_steps", "1048576");

  bad = Valid();
  bad.mutable_local_sgd()->clear_local_optimizer();
  ExpectRefused(bad, "local_sgd.local_optimizer.learning_rate", "required");
  bad.mutable_local_sgd()->mutable_local_optimizer()->set_learning_rate(-0.1f);
  ExpectRefused(bad, "local_sgd.local_optimizer.learning_rate");
  bad = Valid();
  bad.mutable_local_sgd()->mutable_local_optimizer()->set_momentum(1.0f);
  ExpectRefused(bad, "local_sgd.local_optimizer.momentum");
  bad = Valid();
  bad.mutable_local_sgd()->mutable_local_optimizer()->set_weight_decay(-1.0f);
  ExpectRefused(bad, "local_sgd.local_optimizer.weight_decay");
  bad = Valid();
  bad.mutable_local_sgd()->mutable_local_optimizer()->set_momentum(
      std::numeric_limits<float>::quiet_NaN());
  // Every float of a spec must be finite (checked first, by path).
  ExpectRefused(bad, "local_sgd.local_optimizer.momentum", "finite");

  // An optimizer without local steps is a mistake, not a no-op.
  bad = Valid();
  bad.mutable_local_sgd()->set_local_steps(0);
  ExpectRefused(bad, "local_sgd.local_optimizer", "local_steps >= 1");
}

TEST(LocalSgdSpecTest, LocalSgdNeedsBspAndABuiltInModel) {
  v1::JobSpec bad = Valid();
  bad.mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
  bad.mutable_consistency()->set_staleness(2);
  ExpectRefused(bad, "local_sgd.local_steps", "BSP");
  bad.mutable_consistency()->set_model(v1::ConsistencySpec::ASP);
  bad.mutable_consistency()->set_staleness(0);
  ExpectRefused(bad, "local_sgd.local_steps", "BSP");

  bad = Valid();
  v1::ModelSpec* model = bad.mutable_model();
  model->Clear();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* t = model->add_tensors();
  t->set_name("w");
  t->add_shape(4);
  t->set_init(v1::ZEROS);
  bad.clear_dataset();
  ExpectRefused(bad, "local_sgd.local_steps", "EXTERNAL");
}

TEST(LocalSgdSpecTest, LabelsPerWorkerRefusedOutOfRange) {
  v1::JobSpec bad = Valid();
  bad.mutable_dataset()->set_labels_per_worker(-1);
  ExpectRefused(bad, "dataset.labels_per_worker", "got -1");
  bad.mutable_dataset()->set_labels_per_worker(4);  // 3 classes.
  ExpectRefused(bad, "dataset.labels_per_worker", "model.num_classes = 3");
  // 1 label each for 2 workers leaves the third label to nobody.
  bad.mutable_dataset()->set_labels_per_worker(1);
  ExpectRefused(bad, "dataset.labels_per_worker", "1 * 2 < 3");
  bad.set_num_workers(3);
  EXPECT_TRUE(ValidateJobSpec(bad).ok()) << ValidateJobSpec(bad);
}

}  // namespace
}  // namespace ps

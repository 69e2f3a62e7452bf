// Validation at submit of the worker-side training options and the text
// data formats: INVALID_ARGUMENT naming the field.
#include <string>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::StartsWith;

v1::JobSpec Valid() {
  v1::JobSpec spec = testing::TinySpec(4, 3);
  spec.set_num_workers(1);
  spec.set_num_servers(1);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

void ExpectRefused(const v1::JobSpec& spec, const std::string& field) {
  const absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(std::string(status.message()), StartsWith(field + ": "));
}

TEST(TrainingSpecTest, ClippingAndAccumulation) {
  v1::JobSpec spec = Valid();
  spec.mutable_gradient_clipping()->set_max_global_norm(1.0f);
  spec.mutable_gradient_clipping()->set_max_value(0.5f);
  spec.set_accumulation_steps(8);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);

  v1::JobSpec bad = spec;
  bad.mutable_gradient_clipping()->set_max_global_norm(-1.0f);
  ExpectRefused(bad, "gradient_clipping.max_global_norm");
  bad = spec;
  bad.mutable_gradient_clipping()->set_max_value(-0.1f);
  ExpectRefused(bad, "gradient_clipping.max_value");
  bad = spec;
  bad.set_accumulation_steps(-1);
  ExpectRefused(bad, "accumulation_steps");
  bad.set_accumulation_steps(1025);
  ExpectRefused(bad, "accumulation_steps");
  bad.set_accumulation_steps(1024);
  bad.set_batch_size(2048);  // 2^21 samples a push.
  ExpectRefused(bad, "accumulation_steps");
}

TEST(TrainingSpecTest, TextFormatsNeedTheirFilesAndNotIdxPaths) {
  v1::JobSpec spec = Valid();
  v1::DatasetSpec* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::CSV);
  ExpectRefused(spec, "dataset.train_file");  // Required.
  d->set_train_file("train.csv");
  d->set_test_file("test.csv");
  ExpectRefused(spec, "dataset.train_images");  // IDX only.
  d->clear_train_images();
  d->clear_train_labels();
  d->clear_test_images();
  d->clear_test_labels();
  d->set_csv_header(true);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  d->set_format(v1::DatasetSpec::LIBSVM);
  ExpectRefused(spec, "dataset.csv_header");
  d->set_csv_header(false);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  d->set_test_file(std::string("a\nb"));
  ExpectRefused(spec, "dataset.test_file");

  v1::JobSpec idx = Valid();
  idx.mutable_dataset()->set_train_file("train.csv");
  ExpectRefused(idx, "dataset.train_file");  // Text formats only.
  idx = Valid();
  idx.mutable_dataset()->set_format(static_cast<v1::DatasetSpec::Format>(9));
  ExpectRefused(idx, "dataset.format");
}

}  // namespace
}  // namespace ps

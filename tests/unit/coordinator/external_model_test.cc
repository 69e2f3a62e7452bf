// EXTERNAL models in job specs: their tensors as declared, initial values
// by scheme or from worker 0, the digest Python workers send, and
// validation that names the field.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "coordinator/request_validation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::TensorDecl* AddTensor(v1::ModelSpec* model, const std::string& name,
                          std::vector<int64_t> shape,
                          v1::TensorInit init = v1::TENSOR_INIT_UNSPECIFIED) {
  v1::TensorDecl* t = model->add_tensors();
  t->set_name(name);
  for (int64_t d : shape) t->add_shape(d);
  t->set_init(init);
  return t;
}

// A CNN-like module's tensors: conv [16, 1, 3, 3], batch norm scale [16],
// linear [10, 16].
v1::JobSpec ExternalSpec() {
  v1::JobSpec spec;
  spec.set_name("external");
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  AddTensor(model, "features.0.weight", {16, 1, 3, 3});
  AddTensor(model, "features.1.weight", {16}, v1::CONSTANT)->set_value(1);
  AddTensor(model, "features.1.bias", {16}, v1::ZEROS);
  AddTensor(model, "classifier.weight", {10, 16}, v1::HE_UNIFORM);
  AddTensor(model, "classifier.bias", {10}, v1::XAVIER_UNIFORM)->set_fan_in(7);
  spec.set_epochs(2);
  spec.set_batch_size(8);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  return spec;
}

TEST(ExternalModelTest, TensorsAreTheDeclaredOnesWithPyTorchFans) {
  v1::JobSpec spec = ExternalSpec();
  auto tensors = ModelTensors(spec.model());
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 5u);
  EXPECT_EQ((*tensors)[0].name, "features.0.weight");
  EXPECT_THAT((*tensors)[0].shape, ElementsAre(16, 1, 3, 3));
  EXPECT_EQ((*tensors)[0].init, InitKind::kFromWorker);
  EXPECT_EQ((*tensors)[1].init, InitKind::kConstant);
  EXPECT_EQ((*tensors)[1].value, 1.0f);
  EXPECT_EQ((*tensors)[2].init, InitKind::kZeros);
  // PyTorch: fan_in = shape[1] * receptive field, fan_out = shape[0] * ...
  EXPECT_EQ((*tensors)[3].init, InitKind::kHeUniform);
  EXPECT_EQ((*tensors)[3].fan_in, 16);
  EXPECT_EQ((*tensors)[3].fan_out, 10);
  // Declared fans win; a 1-D tensor's are its length.
  EXPECT_EQ((*tensors)[4].fan_in, 7);
  EXPECT_EQ((*tensors)[4].fan_out, 10);
}

TEST(ExternalModelTest, InitialValuesFollowTheScheme) {
  v1::JobSpec spec = ExternalSpec();
  auto tensors = ModelTensors(spec.model());
  ASSERT_TRUE(tensors.ok());
  const std::vector<BlockSpec> blocks = SplitIntoBlocks(*tensors, 100);
  ASSERT_EQ(blocks.size(), 7u);  // The conv (144) and linear (160): two each.
  // FROM_WORKER: the unseeded marker everywhere.
  for (int b : {0, 1}) {
    const std::vector<float> v =
        InitialBlockValues((*tensors)[0], blocks[b], 1);
    EXPECT_TRUE(IsUnseeded(v));
    for (float x : v) {
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof(bits));
      EXPECT_EQ(bits, kUnseededBits);
    }
  }
  EXPECT_THAT(InitialBlockValues((*tensors)[1], blocks[2], 1), Each(1.0f));
  EXPECT_THAT(InitialBlockValues((*tensors)[2], blocks[3], 1), Each(0.0f));
  const std::vector<float> he = InitialBlockValues((*tensors)[3], blocks[4], 1);
  EXPECT_FALSE(IsUnseeded(he));
  for (float x : he) EXPECT_LE(std::abs(x), std::sqrt(6.0f / 16));
  // Computed NaN never reads as unseeded.
  EXPECT_FALSE(IsUnseeded({std::nanf("")}));
  EXPECT_FALSE(IsUnseeded({}));
}

TEST(ExternalModelTest, DigestIsOfNamesAndShapesInNameOrder) {
  std::vector<TensorSpec> tensors = {{.name = "b", .shape = {3}},
                                     {.name = "a", .shape = {2, 3}}};
  // The Python SDK computes the same (tests/python/test_layout.py).
  EXPECT_EQ(ModelDigest(tensors), "fnv1a64:22e4aa33711b16a4");
  std::swap(tensors[0], tensors[1]);
  EXPECT_EQ(ModelDigest(tensors), "fnv1a64:22e4aa33711b16a4");
  tensors[0].shape = {3, 2};
  EXPECT_NE(ModelDigest(tensors), "fnv1a64:22e4aa33711b16a4");
  EXPECT_THAT(ModelDigest({}), StartsWith("fnv1a64:"));
}

TEST(ExternalModelTest, DigestCoversSparseTablesByNameAndDim) {
  v1::JobSpec spec = ExternalSpec();
  auto tensors = ModelTensors(spec.model());
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  // No tables: the tensors' digest, as before tables existed.
  EXPECT_EQ(ModelDigest(*tensors, spec.model()), ModelDigest(*tensors));
  auto add_table = [&spec](const std::string& name, int dim) {
    v1::SparseTableSpec* table = spec.mutable_model()->add_sparse_tables();
    table->set_name(name);
    table->set_dim(dim);
    table->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  };
  add_table("ids", 8);
  add_table("tags", 4);
  const std::string digest = ModelDigest(*tensors, spec.model());
  EXPECT_NE(digest, ModelDigest(*tensors));
  // The Python SDK computes the same (tests/python/test_sparse_routing.py
  // checks it over more specs).
  v1::JobSpec swapped = spec;
  swapped.mutable_model()->mutable_sparse_tables()->SwapElements(0, 1);
  EXPECT_EQ(ModelDigest(*tensors, swapped.model()), digest);
  v1::JobSpec wider = spec;
  wider.mutable_model()->mutable_sparse_tables(1)->set_dim(5);
  EXPECT_NE(ModelDigest(*tensors, wider.model()), digest);
  v1::JobSpec renamed = spec;
  renamed.mutable_model()->mutable_sparse_tables(0)->set_name("id");
  EXPECT_NE(ModelDigest(*tensors, renamed.model()), digest);
  // Other options (the optimizer, the buckets) are the spec's, not the
  // module's: they leave the digest alone.
  v1::JobSpec tuned = spec;
  tuned.mutable_model()->mutable_sparse_tables(0)->set_num_buckets(64);
  EXPECT_EQ(ModelDigest(*tensors, tuned.model()), digest);
}

TEST(ExternalModelTest, AValidSpecPassesWithoutADataSet) {
  v1::JobSpec spec = ExternalSpec();
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(spec.model().tensors(0).init(), v1::FROM_WORKER);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_TRUE(ValidateSubmittedSpec(spec, JobLimits()).ok());
  // The JSON form reads back unchanged.
  auto again = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SerializeAsString(), spec.SerializeAsString());
}

TEST(ExternalModelTest, InvalidSpecsNameTheField) {
  struct Case {
    const char* name;
    std::function<void(v1::JobSpec*)> change;
    const char* error;
  };
  const Case cases[] = {
      {"no tensors",
       [](v1::JobSpec* s) { s->mutable_model()->clear_tensors(); },
       "model.tensors: an EXTERNAL model needs at least one"},
      {"empty name",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(1)->clear_name();
       },
       "model.tensors[1].name: required"},
      {"space in a name",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(1)->set_name("a b");
       },
       "model.tensors[1].name: may hold only printable ASCII"},
      {"long name",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(0)->set_name(
             std::string(257, 'x'));
       },
       "model.tensors[0].name: longer than 256 bytes"},
      {"repeated name",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(2)->set_name("features.1.weight");
       },
       "model.tensors[2].name: \"features.1.weight\" appears twice"},
      {"zero dimension",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(3)->set_shape(1, 0);
       },
       "model.tensors[3].shape[1]: must be in [1, "},
      {"too many dimensions",
       [](v1::JobSpec* s) {
         for (int i = 0; i < 6; ++i) {
           s->mutable_model()->mutable_tensors(0)->add_shape(1);
         }
       },
       "model.tensors[0].shape: more than 8 dimensions"},
      {"overflowing shape",
       [](v1::JobSpec* s) {
         auto* t = s->mutable_model()->mutable_tensors(0);
         t->clear_shape();
         for (int i = 0; i < 4; ++i) t->add_shape(int64_t{1} << 20);
       },
       "model.tensors[0].shape: more than 1099511627776 values"},
      {"too large a model",
       [](v1::JobSpec* s) {
         auto* t = s->mutable_model()->mutable_tensors(3);
         t->set_shape(0, int64_t{1} << 20);
         t->set_shape(1, int64_t{1} << 20);
       },
       "model.tensors[3]: the model would hold more than"},
      {"value without CONSTANT",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(2)->set_value(2);
       },
       "model.tensors[2].value: only CONSTANT uses it"},
      {"fan without a random scheme",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(0)->set_fan_out(3);
       },
       "model.tensors[0].fan_out: only HE_UNIFORM and XAVIER_UNIFORM"},
      {"negative fan",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(3)->set_fan_in(-1);
       },
       "model.tensors[3].fan_in: must be >= 0"},
      {"unknown init",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(3)->set_init(
             static_cast<v1::TensorInit>(42));
       },
       "model.tensors[3].init: must be FROM_WORKER"},
      {"infinite constant",
       [](v1::JobSpec* s) {
         s->mutable_model()->mutable_tensors(1)->set_value(INFINITY);
       },
       "model.tensors[1].value: must be a finite number"},
      {"a built-in field",
       [](v1::JobSpec* s) { s->mutable_model()->set_num_classes(10); },
       "model.num_classes: an EXTERNAL model does not use it"},
      {"hidden layers",
       [](v1::JobSpec* s) { s->mutable_model()->add_hidden_layers(3); },
       "model.hidden_layers: an EXTERNAL model does not use it"},
      {"an incomplete data set",
       [](v1::JobSpec* s) {
         s->mutable_dataset()->set_format(v1::DatasetSpec::IDX);
       },
       "dataset.train_images: required"},
      {"mixed-precision compute",
       [](v1::JobSpec* s) {
         s->mutable_mixed_precision()->set_compute(v1::BF16);
       },
       "mixed_precision.compute: an EXTERNAL model computes"},
      {"tensors of a built-in model",
       [](v1::JobSpec* s) { s->mutable_model()->set_kind(v1::ModelSpec::MLP); },
       "model.tensors: only an EXTERNAL model lists its tensors"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = ExternalSpec();
    c.change(&spec);
    ApplyJobSpecDefaults(&spec);
    const absl::Status status = ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(status.message()), StartsWith(c.error))
        << c.name << ": " << status;
  }
}

TEST(ExternalModelTest, RegisterRequestsCarryAWellFormedDigest) {
  v1::RegisterRequest r;
  r.set_role(v1::WORKER);
  r.set_model_digest("fnv1a64:0123456789abcdef");
  r.set_job_id("job-000001");
  EXPECT_TRUE(ValidateRegisterRequest(r).ok());
  r.set_model_digest("fnv1a64:0123456789ABCDEF");
  EXPECT_THAT(std::string(ValidateRegisterRequest(r).message()),
              StartsWith("model_digest: must be"));
  r.set_model_digest("sha256:0123456789abcdef");
  EXPECT_FALSE(ValidateRegisterRequest(r).ok());
  r.set_model_digest("fnv1a64:0123456789abcdef");
  r.set_job_id("job/1");
  EXPECT_THAT(std::string(ValidateRegisterRequest(r).message()),
              StartsWith("job_id: "));
  r.set_job_id("");
  r.set_role(v1::SERVER);
  r.set_address("127.0.0.1:5000");
  EXPECT_THAT(std::string(ValidateRegisterRequest(r).message()),
              StartsWith("model_digest: only workers"));
}

}  // namespace
}  // namespace ps

// Job specs: JSON parsing, defaults, validation (one test per rule) and the
// staleness bound each consistency model means.
#include "common/job_spec.h"

#include <cstdlib>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The same job as deploy/jobs/fashion-mnist-mlp.json.
constexpr char kFashionMnistMlp[] = R"json({
  "name": "fashion-mnist-mlp",
  "model": {
    "kind": "MLP",
    "input_dim": 784,
    "num_classes": 10,
    "hidden_layers": [256, 128],
    "activation": "RELU"
  },
  "dataset": {
    "format": "IDX",
    "train_images": "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
    "train_labels": "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz",
    "test_images": "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
    "test_labels": "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"
  },
  "epochs": 15,
  "batch_size": 64,
  "seed": 42,
  "optimizer": { "adam": { "learning_rate": 0.001 } },
  "consistency": { "model": "BSP" },
  "num_workers": 2,
  "num_servers": 2,
  "durability": "WAL"
})json";

// Checks the fields of the Fashion-MNIST MLP job.
void ExpectFashionMnistMlp(const v1::JobSpec& spec) {
  EXPECT_EQ(spec.name(), "fashion-mnist-mlp");
  EXPECT_EQ(spec.model().kind(), v1::ModelSpec::MLP);
  EXPECT_EQ(spec.model().input_dim(), 784);
  EXPECT_EQ(spec.model().num_classes(), 10);
  EXPECT_THAT(spec.model().hidden_layers(), ElementsAre(256, 128));
  EXPECT_EQ(spec.model().activation(), v1::RELU);
  EXPECT_EQ(spec.dataset().format(), v1::DatasetSpec::IDX);
  EXPECT_EQ(spec.dataset().train_images(),
            "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  EXPECT_EQ(spec.dataset().test_labels(),
            "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(spec.epochs(), 15);
  EXPECT_EQ(spec.batch_size(), 64);
  EXPECT_EQ(spec.seed(), 42u);
  ASSERT_TRUE(spec.optimizer().has_adam());
  EXPECT_FLOAT_EQ(spec.optimizer().adam().learning_rate(), 0.001f);
  EXPECT_EQ(spec.consistency().model(), v1::ConsistencySpec::BSP);
  EXPECT_EQ(spec.num_workers(), 2);
  EXPECT_EQ(spec.num_servers(), 2);
  EXPECT_EQ(spec.durability(), v1::WAL);
  EXPECT_EQ(spec.block_elems(), 0);  // Not in the file: a default fills it.
}

// A spec that passes validation; each rule test breaks one field of it.
v1::JobSpec ValidSpec() {
  auto spec = JobSpecFromJson(kFashionMnistMlp);
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  return *spec;
}

// Validates ValidSpec() changed by `mutate` (defaults applied after).
absl::Status ValidateMutated(const std::function<void(v1::JobSpec*)>& mutate) {
  v1::JobSpec spec = ValidSpec();
  mutate(&spec);
  return ValidateJobSpec(spec);
}

TEST(JobSpecFromJsonTest, ParsesEmbeddedFashionMnistJob) {
  auto spec = JobSpecFromJson(kFashionMnistMlp);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ExpectFashionMnistMlp(*spec);
}

TEST(JobSpecFromJsonTest, ParsesDeployedFashionMnistJob) {
  auto spec = JobSpecFromFile(
      testing::SourcePath("deploy/jobs/fashion-mnist-mlp.json"));
  if (absl::IsNotFound(spec.status())) {
    GTEST_SKIP() << spec.status() << " (set PS_SOURCE_DIR)";
  }
  ASSERT_TRUE(spec.ok()) << spec.status();
  ExpectFashionMnistMlp(*spec);
  ApplyJobSpecDefaults(&*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST(JobSpecFromJsonTest, UnknownFieldIsInvalidArgumentWithParserMessage) {
  auto spec = JobSpecFromJson(R"({"name": "x", "epochz": 3})");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("job spec is not valid JSON for ps.v1.JobSpec: "));
  // The parser's own message names the misspelt field.
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("epochz"));
}

TEST(JobSpecFromJsonTest, UnknownNestedFieldIsRefused) {
  auto spec = JobSpecFromJson(R"({"model": {"kind": "MLP", "layers": [3]}})");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("layers"));
}

TEST(JobSpecFromJsonTest, MalformedJsonIsInvalidArgument) {
  for (const char* json :
       {R"({"name": "x",)", "not json", R"({"epochs": "many"})",
        R"({"consistency": {"model": "SOMETIMES"}})"}) {
    auto spec = JobSpecFromJson(json);
    ASSERT_FALSE(spec.ok()) << json;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(spec.status().message()),
                StartsWith("job spec is not valid JSON for ps.v1.JobSpec: "))
        << json;
  }
}

TEST(JobSpecToJsonTest, RoundTrips) {
  v1::JobSpec spec = ValidSpec();
  auto back = JobSpecFromJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), spec.SerializeAsString());
}

TEST(ApplyJobSpecDefaultsTest, FillsUnsetFields) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind(v1::ModelSpec::MLP);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01f);
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(spec.block_elems(), 262144);
  EXPECT_EQ(spec.block_elems(), kDefaultBlockElems);
  EXPECT_EQ(spec.consistency().model(), v1::ConsistencySpec::BSP);
  EXPECT_EQ(spec.durability(), v1::WAL);
  EXPECT_EQ(spec.model().activation(), v1::RELU);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().beta1(), 0.9f);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().beta2(), 0.999f);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().epsilon(), 1e-8f);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().learning_rate(), 0.01f);
}

TEST(ApplyJobSpecDefaultsTest, KeepsSetFields) {
  v1::JobSpec spec;
  spec.set_block_elems(1000);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
  spec.mutable_consistency()->set_staleness(3);
  spec.set_durability(v1::SYNC);
  spec.mutable_model()->set_kind(v1::ModelSpec::MLP);
  spec.mutable_model()->set_activation(v1::TANH);
  auto* adam = spec.mutable_optimizer()->mutable_adam();
  adam->set_beta1(0.5f);
  adam->set_beta2(0.75f);
  adam->set_epsilon(1e-3f);
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(spec.block_elems(), 1000);
  EXPECT_EQ(spec.consistency().model(), v1::ConsistencySpec::SSP);
  EXPECT_EQ(spec.consistency().staleness(), 3);
  EXPECT_EQ(spec.durability(), v1::SYNC);
  EXPECT_EQ(spec.model().activation(), v1::TANH);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().beta1(), 0.5f);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().beta2(), 0.75f);
  EXPECT_FLOAT_EQ(spec.optimizer().adam().epsilon(), 1e-3f);
}

TEST(ApplyJobSpecDefaultsTest, DoesNotInventAnOptimizer) {
  v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  EXPECT_FALSE(spec.optimizer().has_adam());
  EXPECT_FALSE(spec.optimizer().has_sgd());
}

TEST(ValidateJobSpecTest, AcceptsTheFashionMnistJob) {
  EXPECT_TRUE(ValidateJobSpec(ValidSpec()).ok())
      << ValidateJobSpec(ValidSpec());
}

TEST(ValidateJobSpecTest, AcceptsSgdSspAndSoftmaxRegression) {
  absl::Status s = ValidateMutated([](v1::JobSpec* spec) {
    spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
    spec->mutable_optimizer()->mutable_sgd()->set_momentum(0.9f);
    spec->mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
    spec->mutable_consistency()->set_staleness(0);
    spec->mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
    spec->mutable_model()->clear_hidden_layers();
    spec->set_block_elems(4 * kDefaultBlockElems);  // The largest allowed.
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Expects INVALID_ARGUMENT whose message starts with "<field>: ".
void ExpectFieldError(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), StartsWith(field + ": "))
      << status;
}

TEST(ValidateJobSpecTest, EpochsMustBePositive) {
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) { s->set_epochs(0); }),
                   "epochs");
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) { s->set_epochs(-2); }),
                   "epochs");
}

TEST(ValidateJobSpecTest, BatchSizeMustBePositive) {
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) { s->set_batch_size(0); }),
      "batch_size");
}

TEST(ValidateJobSpecTest, NumWorkersMustBePositive) {
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) { s->set_num_workers(0); }),
      "num_workers");
}

TEST(ValidateJobSpecTest, NumServersMustBePositive) {
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) { s->set_num_servers(-1); }),
      "num_servers");
}

TEST(ValidateJobSpecTest, OptimizerMustBeSet) {
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) { s->clear_optimizer(); }),
      "optimizer");
}

TEST(ValidateJobSpecTest, SgdLearningRateMustBePositive) {
  for (float lr : {0.0f, -0.1f}) {
    ExpectFieldError(
        ValidateMutated([lr](v1::JobSpec* s) {
          s->mutable_optimizer()->mutable_sgd()->set_learning_rate(lr);
        }),
        "optimizer.sgd.learning_rate");
  }
}

TEST(ValidateJobSpecTest, AdamBeta1MustBeBelowOne) {
  for (float beta1 : {1.0f, 1.5f}) {
    ExpectFieldError(ValidateMutated([beta1](v1::JobSpec* s) {
                       s->mutable_optimizer()->mutable_adam()->set_beta1(beta1);
                     }),
                     "optimizer.adam.beta1");
  }
}

TEST(ValidateJobSpecTest, SspStalenessMustNotBeNegative) {
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) {
        s->mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
        s->mutable_consistency()->set_staleness(-1);
      }),
      "consistency.staleness");
}

TEST(ValidateJobSpecTest, StalenessIsOnlyForSsp) {
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) {
        s->mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
        s->mutable_consistency()->set_staleness(2);
      }),
      "consistency.staleness");
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) {
        s->mutable_consistency()->set_model(v1::ConsistencySpec::ASP);
        s->mutable_consistency()->set_staleness(2);
      }),
      "consistency.staleness");
}

TEST(ValidateJobSpecTest, DatasetPathsAreRequired) {
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_dataset()->clear_train_images();
                   }),
                   "dataset.train_images");
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_dataset()->clear_train_labels();
                   }),
                   "dataset.train_labels");
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_dataset()->clear_test_images();
                   }),
                   "dataset.test_images");
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_dataset()->clear_test_labels();
                   }),
                   "dataset.test_labels");
}

TEST(ValidateJobSpecTest, DatasetFormatMustBeIdx) {
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) {
        s->mutable_dataset()->set_format(v1::DatasetSpec::FORMAT_UNSPECIFIED);
      }),
      "dataset.format");
}

TEST(ValidateJobSpecTest, ModelInputDimMustBePositive) {
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_model()->set_input_dim(0);
                   }),
                   "model.input_dim");
}

TEST(ValidateJobSpecTest, ModelNeedsTwoClasses) {
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_model()->set_num_classes(1);
                   }),
                   "model.num_classes");
}

TEST(ValidateJobSpecTest, HiddenLayerWidthsMustBePositive) {
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_model()->set_hidden_layers(1, 0);
                   }),
                   "model.hidden_layers[1]");
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->mutable_model()->set_hidden_layers(1, -5);
                   }),
                   "model.hidden_layers[1]");
}

TEST(ValidateJobSpecTest, BlockElemsMustFitInAMessage) {
  ExpectFieldError(ValidateMutated([](v1::JobSpec* s) {
                     s->set_block_elems(4 * kDefaultBlockElems + 1);
                   }),
                   "block_elems");
  ExpectFieldError(
      ValidateMutated([](v1::JobSpec* s) { s->set_block_elems(-1); }),
      "block_elems");
}

TEST(ValidateJobSpecTest, WireGradientsIsAnyFormatWhateverTheCompute) {
  for (v1::Precision wire : {v1::FP32, v1::FP16, v1::BF16}) {
    for (v1::Precision compute : {v1::FP32, v1::FP16, v1::BF16}) {
      v1::JobSpec spec = ValidSpec();
      spec.mutable_mixed_precision()->set_compute(compute);
      spec.mutable_mixed_precision()->set_wire_gradients(wire);
      ApplyJobSpecDefaults(&spec);
      EXPECT_TRUE(ValidateJobSpec(spec).ok())
          << ValidateJobSpec(spec) << " wire " << wire << " compute "
          << compute;
    }
  }
}

TEST(ValidateJobSpecTest, WireGradientsMustBeAFormat) {
  for (int bad : {3, -1, 1000}) {
    ExpectFieldError(ValidateMutated([bad](v1::JobSpec* s) {
                       s->mutable_mixed_precision()->set_wire_gradients(
                           static_cast<v1::Precision>(bad));
                     }),
                     "mixed_precision.wire_gradients");
  }
}

TEST(JobSpecFromJsonTest, ParsesWireGradients) {
  auto spec = JobSpecFromJson(
      R"json({"mixed_precision": {"wire_gradients": "BF16"}})json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mixed_precision().wire_gradients(), v1::BF16);
  EXPECT_EQ(spec->mixed_precision().compute(), v1::FP32);  // Independent.
  auto bad = JobSpecFromJson(
      R"json({"mixed_precision": {"wire_gradients": "FP8"}})json");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValidateJobSpecTest, WireParametersIsAnyFormatWhateverTheRest) {
  for (v1::Precision params : {v1::FP32, v1::FP16, v1::BF16}) {
    for (v1::Precision grads : {v1::FP32, v1::BF16}) {
      v1::JobSpec spec = ValidSpec();
      spec.mutable_mixed_precision()->set_wire_parameters(params);
      spec.mutable_mixed_precision()->set_wire_gradients(grads);
      ApplyJobSpecDefaults(&spec);
      EXPECT_TRUE(ValidateJobSpec(spec).ok())
          << ValidateJobSpec(spec) << " parameters " << params << " gradients "
          << grads;
    }
  }
}

TEST(ValidateJobSpecTest, WireParametersMustBeAFormat) {
  for (int bad : {3, -1, 1000}) {
    ExpectFieldError(ValidateMutated([bad](v1::JobSpec* s) {
                       s->mutable_mixed_precision()->set_wire_parameters(
                           static_cast<v1::Precision>(bad));
                     }),
                     "mixed_precision.wire_parameters");
  }
}

TEST(JobSpecFromJsonTest, ParsesWireParameters) {
  auto spec = JobSpecFromJson(
      R"json({"mixed_precision": {"wire_parameters": "FP16"}})json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mixed_precision().wire_parameters(), v1::FP16);
  EXPECT_EQ(spec->mixed_precision().wire_gradients(), v1::FP32);
  auto bad = JobSpecFromJson(
      R"json({"mixed_precision": {"wire_parameters": "INT8"}})json");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EffectiveStalenessTest, BspIsZero) {
  v1::ConsistencySpec c;
  c.set_model(v1::ConsistencySpec::BSP);
  EXPECT_EQ(EffectiveStaleness(c), 0);
  c.set_model(v1::ConsistencySpec::MODEL_UNSPECIFIED);  // Treated as BSP.
  EXPECT_EQ(EffectiveStaleness(c), 0);
}

TEST(EffectiveStalenessTest, SspIsTheBound) {
  v1::ConsistencySpec c;
  c.set_model(v1::ConsistencySpec::SSP);
  c.set_staleness(0);
  EXPECT_EQ(EffectiveStaleness(c), 0);
  c.set_staleness(3);
  EXPECT_EQ(EffectiveStaleness(c), 3);
}

TEST(EffectiveStalenessTest, AspIsUnbounded) {
  v1::ConsistencySpec c;
  c.set_model(v1::ConsistencySpec::ASP);
  EXPECT_EQ(EffectiveStaleness(c), kAsyncStaleness);
  EXPECT_GT(kAsyncStaleness, int64_t{1} << 32);
}

TEST(ApplyJobSpecDefaultsTest, DerivesTheBlockSizeFromModelAndServers) {
  v1::JobSpec spec = ValidSpec();
  spec.clear_block_elems();
  spec.set_num_servers(2);
  ApplyJobSpecDefaults(&spec);
  auto tensors = ModelTensors(spec.model());
  ASSERT_TRUE(tensors.ok());
  const int64_t elems = ModelBytes(*tensors) / 4;
  // About kBlocksPerServer blocks per server, a multiple of 1 KiB.
  EXPECT_EQ(spec.block_elems(), DeriveBlockElems(*tensors, 2));
  EXPECT_EQ(spec.block_elems() % kBlockAlignElems, 0);
  EXPECT_GE(spec.block_elems() * 2 * kBlocksPerServer, elems);
  EXPECT_LT((spec.block_elems() - kBlockAlignElems) * 2 * kBlocksPerServer,
            elems);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // More servers, smaller blocks; one server, the 1 MiB default.
  EXPECT_LT(DeriveBlockElems(*tensors, 4), DeriveBlockElems(*tensors, 2));
  EXPECT_EQ(DeriveBlockElems(*tensors, 1), kDefaultBlockElems);
  // Never above 1 MiB, however large the model.
  std::vector<TensorSpec> huge(1);
  huge[0].shape = {int64_t{1} << 40};
  EXPECT_EQ(DeriveBlockElems(huge, 2), kDefaultBlockElems);
  EXPECT_EQ(DeriveBlockElems(huge, kMaxNodesPerJob), kDefaultBlockElems);
  // A tiny model still gets whole 1 KiB blocks.
  std::vector<TensorSpec> tiny(1);
  tiny[0].shape = {10};
  EXPECT_EQ(DeriveBlockElems(tiny, 4), kBlockAlignElems);
}

}  // namespace
}  // namespace ps

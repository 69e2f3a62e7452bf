#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/v1/job.pb.h"
#include "tests/testing/model_reference.h"
#include "worker/model/cpu/cpu_backend.h"

namespace ps {
namespace {

using ps::testing::RandomParams;
using ps::testing::ReferenceActivation;
using ps::testing::ReferenceCrossEntropy;
using ::testing::ElementsAre;

v1::ModelSpec MlpSpec(int input_dim, const std::vector<int>& hidden,
                      int classes, v1::Activation activation) {
  v1::ModelSpec spec;
  spec.set_kind(hidden.empty() ? v1::ModelSpec::SOFTMAX_REGRESSION
                               : v1::ModelSpec::MLP);
  for (int h : hidden) spec.add_hidden_layers(h);
  spec.set_activation(activation);
  spec.set_input_dim(input_dim);
  spec.set_num_classes(classes);
  return spec;
}

// The mean cross-entropy loss of the model, computed independently of the
// backend and in double precision: the reference for the gradient check.
double ReferenceLoss(const v1::ModelSpec& spec,
                     const std::vector<std::vector<double>>& params,
                     const std::vector<float>& features,
                     const std::vector<int32_t>& labels) {
  const int batch = labels.size();
  const int layers = params.size() / 2;
  double total = 0;
  for (int r = 0; r < batch; ++r) {
    std::vector<double> x(features.begin() + int64_t{r} * spec.input_dim(),
                          features.begin() + int64_t{r + 1} * spec.input_dim());
    for (int l = 0; l < layers; ++l) {
      const std::vector<double>& w = params[size_t{2} * l];
      const std::vector<double>& b = params[2 * l + 1];
      const int in = x.size();
      const int out = b.size();
      std::vector<double> y(out);
      for (int j = 0; j < out; ++j) {
        double sum = b[j];
        for (int i = 0; i < in; ++i) sum += x[i] * w[i * out + j];
        y[j] =
            l + 1 == layers ? sum : ReferenceActivation(spec.activation(), sum);
      }
      x = std::move(y);
    }
    total += ReferenceCrossEntropy(x, labels[r]);
  }
  return total / batch;
}

// Parameters drawn as the servers draw them (InitialBlockValues).
std::vector<std::vector<float>> InitialParams(const std::vector<TensorSpec>& ts,
                                              uint64_t seed) {
  std::vector<std::vector<float>> params;
  for (const BlockSpec& block : SplitIntoBlocks(ts, int64_t{1} << 30)) {
    params.push_back(InitialBlockValues(ts[block.tensor_index], block, seed));
  }
  return params;
}

class ModelTest : public ::testing::Test {
 protected:
  std::unique_ptr<CpuBackend> backend_ = CpuBackend::Create({});
};

struct GradCase {
  std::string name;
  std::vector<int> hidden;
  v1::Activation activation;
};
void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

class ModelGradientTest : public ModelTest,
                          public ::testing::WithParamInterface<GradCase> {};

// Every gradient entry of every tensor against central finite differences of
// the double-precision reference loss (step 1e-5, so truncation and rounding
// errors are ~1e-10). Tolerance: |analytic - numeric| <= 1e-4 + 1e-3 *
// |numeric|, room for the float32 forward and backward passes.
TEST_P(ModelGradientTest, MatchesFiniteDifferences) {
  const v1::ModelSpec spec =
      MlpSpec(5, GetParam().hidden, 3, GetParam().activation);
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937 rng(42);
  const std::vector<std::vector<float>> params =
      RandomParams((*model)->tensors(), &rng);
  ASSERT_TRUE((*model)->SetParameters(params).ok());

  const int batch = 6;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> features(size_t{5} * batch);
  for (float& v : features) v = dist(rng);
  const std::vector<int32_t> labels = {0, 1, 2, 2, 1, 0};

  std::vector<std::vector<float>> grads;
  absl::StatusOr<float> loss =
      (*model)->ComputeGradients(features.data(), labels.data(), batch, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_EQ(grads.size(), params.size());

  testing::ExpectLossAndGradientsMatch(
      [&](const std::vector<std::vector<double>>& p) {
        return ReferenceLoss(spec, p, features, labels);
      },
      params, *loss, grads, (*model)->tensors());
}

INSTANTIATE_TEST_SUITE_P(
    Models, ModelGradientTest,
    ::testing::Values(
        GradCase{"MlpRelu", {4}, v1::RELU}, GradCase{"MlpTanh", {4}, v1::TANH},
        GradCase{"MlpSigmoid", {4}, v1::SIGMOID},
        GradCase{"MlpUnspecifiedIsRelu", {4}, v1::ACTIVATION_UNSPECIFIED},
        GradCase{"MlpTwoHiddenTanh", {4, 6}, v1::TANH},
        GradCase{"SoftmaxRegression", {}, v1::RELU}),
    [](const ::testing::TestParamInfo<GradCase>& info) {
      return info.param.name;
    });

TEST_F(ModelTest, TensorsFollowModelTensors) {
  const v1::ModelSpec spec = MlpSpec(5, {4}, 3, v1::RELU);
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::string> names;
  for (const TensorSpec& t : (*model)->tensors()) names.push_back(t.name);
  EXPECT_THAT(names, ElementsAre("dense0.weight", "dense0.bias",
                                 "dense1.weight", "dense1.bias"));
  EXPECT_THAT((*model)->tensors()[0].shape, ElementsAre(5, 4));
  EXPECT_THAT((*model)->tensors()[3].shape, ElementsAre(3));
}

TEST_F(ModelTest, InvalidSpecIsInvalidArgument) {
  v1::ModelSpec spec = MlpSpec(5, {4}, 3, v1::RELU);
  spec.set_num_classes(1);
  EXPECT_EQ(Model::Create(spec, backend_.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  spec = MlpSpec(5, {4}, 3, v1::RELU);
  spec.set_kind(v1::ModelSpec::KIND_UNSPECIFIED);
  EXPECT_EQ(Model::Create(spec, backend_.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  spec = MlpSpec(5, {4}, 3, static_cast<v1::Activation>(42));
  EXPECT_EQ(Model::Create(spec, backend_.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelTest, SetParametersSizeMismatchIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(MlpSpec(5, {4}, 3, v1::RELU), backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937 rng(1);
  std::vector<std::vector<float>> params =
      RandomParams((*model)->tensors(), &rng);
  EXPECT_TRUE((*model)->SetParameters(params).ok());

  std::vector<std::vector<float>> wrong = params;
  wrong[2].pop_back();
  absl::Status status = (*model)->SetParameters(wrong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("dense1.weight"));
  wrong = params;
  wrong.pop_back();
  EXPECT_EQ((*model)->SetParameters(wrong).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelTest, BadLabelOrBatchIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(MlpSpec(2, {3}, 3, v1::RELU), backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<float> features = {0.1f, 0.2f, 0.3f, 0.4f};
  std::vector<std::vector<float>> grads;
  for (int32_t bad : {-1, 3}) {
    const std::vector<int32_t> labels = {0, bad};
    EXPECT_EQ((*model)
                  ->ComputeGradients(features.data(), labels.data(), 2, &grads)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*model)
                  ->CountCorrect(features.data(), labels.data(), 2)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument);
  }
  const std::vector<int32_t> labels = {0, 1};
  EXPECT_EQ((*model)
                ->ComputeGradients(features.data(), labels.data(), 0, &grads)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelTest, CountCorrectHandcrafted) {
  // Softmax regression with W = I, b = 0 predicts the larger feature.
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(MlpSpec(2, {}, 2, v1::RELU), backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->SetParameters({{1, 0, 0, 1}, {0, 0}}).ok());
  const std::vector<float> features = {1, 0, 0, 1, 2, 3, 5, -1};
  const std::vector<int32_t> labels = {0, 0, 1, 1};
  // Predictions 0, 1, 1, 0: samples 0 and 2 are right.
  absl::StatusOr<int64_t> correct =
      (*model)->CountCorrect(features.data(), labels.data(), 4);
  ASSERT_TRUE(correct.ok()) << correct.status();
  EXPECT_EQ(*correct, 2);
  EXPECT_EQ(*(*model)->CountCorrect(features.data(), labels.data(), 0), 0);

  // A bias favouring class 1 flips sample 0 (1 + 0 < 0 + 2).
  ASSERT_TRUE((*model)->SetParameters({{1, 0, 0, 1}, {0, 2}}).ok());
  EXPECT_EQ(*(*model)->CountCorrect(features.data(), labels.data(), 4), 1);
}

TEST_F(ModelTest, BuffersAreReusedAcrossBatchSizes) {
  const v1::ModelSpec spec = MlpSpec(5, {4}, 3, v1::TANH);
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, backend_.get());
  absl::StatusOr<std::unique_ptr<Model>> fresh =
      Model::Create(spec, backend_.get());
  ASSERT_TRUE(model.ok() && fresh.ok());
  std::mt19937 rng(3);
  const std::vector<std::vector<float>> params =
      RandomParams((*model)->tensors(), &rng);
  ASSERT_TRUE((*model)->SetParameters(params).ok());
  ASSERT_TRUE((*fresh)->SetParameters(params).ok());
  std::vector<float> features(size_t{8} * 5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : features) v = dist(rng);
  const std::vector<int32_t> labels = {2, 0, 1, 1, 0, 2, 2, 1};

  // Large batch, evaluation, then a smaller batch: same as a fresh model.
  std::vector<std::vector<float>> grads, expected;
  ASSERT_TRUE((*model)
                  ->ComputeGradients(features.data(), labels.data(), 8, &grads)
                  .ok());
  ASSERT_TRUE((*model)->CountCorrect(features.data(), labels.data(), 8).ok());
  absl::StatusOr<float> loss =
      (*model)->ComputeGradients(features.data(), labels.data(), 3, &grads);
  absl::StatusOr<float> fresh_loss =
      (*fresh)->ComputeGradients(features.data(), labels.data(), 3, &expected);
  ASSERT_TRUE(loss.ok() && fresh_loss.ok());
  EXPECT_EQ(*loss, *fresh_loss);
  EXPECT_EQ(grads, expected);
}

// On the CPU backend UseParameters reads the caller's parameters in place and
// ComputeGradients writes into the caller's buffers: the same losses and
// gradients as SetParameters' copies, the model following the caller's
// buffers from step to step, and SetParameters (evaluation) back on copies.
TEST_F(ModelTest, UseParametersMatchesSetParametersAndReadsInPlace) {
  const v1::ModelSpec spec = MlpSpec(5, {4}, 3, v1::TANH);
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, backend_.get());
  absl::StatusOr<std::unique_ptr<Model>> copying =
      Model::Create(spec, backend_.get());
  ASSERT_TRUE(model.ok() && copying.ok());
  ASSERT_TRUE(backend_->device_memory_is_host());
  std::mt19937 rng(4);
  // Two parameter buffers and two gradient buffers, alternating as a
  // worker's steps use them.
  std::vector<std::vector<float>> params[2] = {
      RandomParams((*model)->tensors(), &rng),
      RandomParams((*model)->tensors(), &rng)};
  std::vector<float> features(size_t{6} * 5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : features) v = dist(rng);
  const std::vector<int32_t> labels = {2, 0, 1, 1, 0, 2};
  std::vector<std::vector<float>> grads[2], expected;
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<float>>& step_params = params[step % 2];
    if (step >= 2) {  // The caller changed the buffer since the last use.
      for (std::vector<float>& t : step_params) t[0] += 0.25f;
    }
    ASSERT_TRUE((*model)->UseParameters(step_params).ok());
    ASSERT_TRUE((*copying)->SetParameters(step_params).ok());
    absl::StatusOr<float> loss = (*model)->ComputeGradients(
        features.data(), labels.data(), 6, &grads[step % 2]);
    absl::StatusOr<float> copied_loss = (*copying)->ComputeGradients(
        features.data(), labels.data(), 6, &expected);
    ASSERT_TRUE(loss.ok() && copied_loss.ok());
    EXPECT_EQ(*loss, *copied_loss) << "step " << step;
    EXPECT_EQ(grads[step % 2], expected) << "step " << step;
  }
  // The layers read the buffer itself, not a copy made by UseParameters:
  // what spares the copy (a caller must not change it during a step).
  for (std::vector<float>& t : params[1]) t[1] -= 0.5f;
  ASSERT_TRUE((*copying)->SetParameters(params[1]).ok());
  ASSERT_TRUE(
      (*model)
          ->ComputeGradients(features.data(), labels.data(), 6, &grads[1])
          .ok());
  ASSERT_TRUE(
      (*copying)
          ->ComputeGradients(features.data(), labels.data(), 6, &expected)
          .ok());
  EXPECT_EQ(grads[1], expected);
  // After SetParameters the model no longer reads the caller's buffers.
  const std::vector<std::vector<float>> original = params[0];
  ASSERT_TRUE((*model)->SetParameters(params[0]).ok());
  for (std::vector<float>& t : params[0]) std::fill(t.begin(), t.end(), 0.0f);
  ASSERT_TRUE((*copying)->SetParameters(original).ok());
  ASSERT_TRUE(
      (*model)
          ->ComputeGradients(features.data(), labels.data(), 6, &grads[0])
          .ok());
  ASSERT_TRUE(
      (*copying)
          ->ComputeGradients(features.data(), labels.data(), 6, &expected)
          .ok());
  EXPECT_EQ(grads[0], expected);
  // Sizes are checked as by SetParameters.
  std::vector<std::vector<float>> wrong = params[1];
  wrong[1].pop_back();
  EXPECT_EQ((*model)->UseParameters(wrong).code(),
            absl::StatusCode::kInvalidArgument);
}

// Three Gaussian blobs in 4-D, far apart relative to their spread.
void MakeBlobs(int n, std::mt19937* rng, std::vector<float>* features,
               std::vector<int32_t>* labels) {
  const float centers[3][4] = {{2, 0, 0, 1}, {-2, 1, 0, -1}, {0, -2, 2, 0}};
  std::normal_distribution<float> noise(0.0f, 0.5f);
  std::uniform_int_distribution<int> klass(0, 2);
  features->clear();
  labels->clear();
  for (int i = 0; i < n; ++i) {
    const int c = klass(*rng);
    labels->push_back(c);
    for (int d = 0; d < 4; ++d)
      features->push_back(centers[c][d] + noise(*rng));
  }
}

TEST_F(ModelTest, SgdLearnsSeparableProblem) {
  const v1::ModelSpec spec = MlpSpec(4, {16}, 3, v1::RELU);
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::vector<float>> params =
      InitialParams((*model)->tensors(), /*seed=*/5);
  ASSERT_TRUE((*model)->SetParameters(params).ok());

  std::mt19937 rng(9);
  std::vector<float> train_x, test_x;
  std::vector<int32_t> train_y, test_y;
  MakeBlobs(640, &rng, &train_x, &train_y);
  MakeBlobs(3000, &rng, &test_x, &test_y);  // Several CountCorrect chunks.

  const absl::StatusOr<int64_t> before =
      (*model)->CountCorrect(test_x.data(), test_y.data(), test_y.size());
  ASSERT_TRUE(before.ok());

  const int batch = 32;
  const float lr = 0.1f;
  std::vector<std::vector<float>> grads;
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < 200; ++step) {
    const int offset = (step * batch) % static_cast<int>(train_y.size());
    absl::StatusOr<float> loss =
        (*model)->ComputeGradients(train_x.data() + ptrdiff_t{4} * offset,
                                   train_y.data() + offset, batch, &grads);
    ASSERT_TRUE(loss.ok()) << loss.status();
    if (step == 0) first_loss = *loss;
    last_loss = *loss;
    for (size_t t = 0; t < params.size(); ++t) {
      for (size_t i = 0; i < params[t].size(); ++i) {
        params[t][i] -= lr * grads[t][i];
      }
    }
    ASSERT_TRUE((*model)->SetParameters(params).ok());
  }
  absl::StatusOr<int64_t> correct =
      (*model)->CountCorrect(test_x.data(), test_y.data(), test_y.size());
  ASSERT_TRUE(correct.ok()) << correct.status();
  const double accuracy = static_cast<double>(*correct) / test_y.size();
  EXPECT_GT(accuracy, 0.95)
      << "before training: " << static_cast<double>(*before) / test_y.size();
  EXPECT_LT(last_loss, first_loss / 4);
}

}  // namespace
}  // namespace ps

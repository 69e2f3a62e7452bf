// The CNN and mixed precision of worker/model.h on the CPU backend: gradients
// against finite differences of a double-precision reference CNN, invalid
// specs, and fp16/bf16 steps against float32 ones.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/v1/job.pb.h"
#include "tests/testing/model_reference.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"

namespace ps {
namespace {

using ps::testing::RandomParams;
using ps::testing::ReferenceActivation;
using ps::testing::ReferenceCrossEntropy;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// height x width x channels images, conv layers of (filters, kernel), then
// dense hidden layers, then `classes` outputs.
v1::ModelSpec CnnSpec(int height, int width, int channels,
                      std::vector<std::pair<int, int>> convs,
                      std::vector<int> hidden, int classes,
                      v1::Activation activation = v1::RELU) {
  v1::ModelSpec spec;
  spec.set_kind(v1::ModelSpec::CNN);
  spec.set_input_dim(height * width * channels);
  spec.set_num_classes(classes);
  spec.set_activation(activation);
  spec.mutable_image()->set_height(height);
  spec.mutable_image()->set_width(width);
  spec.mutable_image()->set_channels(channels);
  for (const auto& [filters, kernel] : convs) {
    v1::ConvLayer* conv = spec.add_conv_layers();
    conv->set_filters(filters);
    conv->set_kernel_size(kernel);
  }
  for (int h : hidden) spec.add_hidden_layers(h);
  return spec;
}

// The mean cross-entropy loss of a CNN, written directly from the
// definitions (HWC images, "same" convolution, 2x2 max pooling) in double
// precision: the reference of the gradient check.
double ReferenceCnnLoss(const v1::ModelSpec& spec,
                        const std::vector<std::vector<double>>& params,
                        const std::vector<float>& features,
                        const std::vector<int32_t>& labels) {
  double total = 0;
  const int batch = labels.size();
  for (int s = 0; s < batch; ++s) {
    int h = spec.image().height(), w = spec.image().width(),
        c = spec.image().channels();
    std::vector<double> x(features.begin() + s * spec.input_dim(),
                          features.begin() + (s + 1) * spec.input_dim());
    size_t t = 0;
    for (const v1::ConvLayer& conv : spec.conv_layers()) {
      const int f = conv.filters(), k = conv.kernel_size(), pad = k / 2;
      const std::vector<double>& weight = params[t];  // [(kh, kw, c), f].
      const std::vector<double>& bias = params[t + 1];
      t += 2;
      std::vector<double> y(h * w * f);
      for (int oh = 0; oh < h; ++oh) {
        for (int ow = 0; ow < w; ++ow) {
          for (int o = 0; o < f; ++o) {
            double sum = bias[o];
            for (int kh = 0; kh < k; ++kh) {
              for (int kw = 0; kw < k; ++kw) {
                const int ih = oh + kh - pad, iw = ow + kw - pad;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                for (int i = 0; i < c; ++i) {
                  sum += x[(ih * w + iw) * c + i] *
                         weight[((kh * k + kw) * c + i) * f + o];
                }
              }
            }
            y[(oh * w + ow) * f + o] =
                ReferenceActivation(spec.activation(), sum);
          }
        }
      }
      std::vector<double> pooled((h / 2) * (w / 2) * f);
      for (int ph = 0; ph < h / 2; ++ph) {
        for (int pw = 0; pw < w / 2; ++pw) {
          for (int o = 0; o < f; ++o) {
            double m = -INFINITY;
            for (int dh = 0; dh < 2; ++dh) {
              for (int dw = 0; dw < 2; ++dw) {
                m = std::max(m, y[((2 * ph + dh) * w + 2 * pw + dw) * f + o]);
              }
            }
            pooled[(ph * (w / 2) + pw) * f + o] = m;
          }
        }
      }
      x = std::move(pooled);
      h /= 2;
      w /= 2;
      c = f;
    }
    for (; t < params.size(); t += 2) {
      const std::vector<double>& weight = params[t];
      const std::vector<double>& bias = params[t + 1];
      const int in = x.size(), out = bias.size();
      std::vector<double> y(out);
      for (int j = 0; j < out; ++j) {
        double sum = bias[j];
        for (int i = 0; i < in; ++i) sum += x[i] * weight[i * out + j];
        y[j] = t + 2 == params.size()
                   ? sum
                   : ReferenceActivation(spec.activation(), sum);
      }
      x = std::move(y);
    }
    total += ReferenceCrossEntropy(x, labels[s]);
  }
  return total / batch;
}

std::vector<float> RandomFeatures(int n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

class CnnModelTest : public ::testing::Test {
 protected:
  std::unique_ptr<CpuBackend> backend_ = CpuBackend::Create({});
};

TEST_F(CnnModelTest, TensorsHaveConvThenDenseShapes) {
  // 28x28x1 -> conv 16 (3x3) -> 14x14x16 -> conv 32 (5x5) -> 7x7x32 = 1568.
  const v1::ModelSpec spec = CnnSpec(28, 28, 1, {{16, 3}, {32, 5}}, {128}, 10);
  absl::StatusOr<std::vector<TensorSpec>> tensors = ModelTensors(spec);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const TensorSpec& t : *tensors) {
    names.push_back(t.name);
    shapes.push_back(t.shape);
  }
  EXPECT_THAT(names, ElementsAre("conv0.weight", "conv0.bias", "conv1.weight",
                                 "conv1.bias", "dense0.weight", "dense0.bias",
                                 "dense1.weight", "dense1.bias"));
  EXPECT_THAT(shapes, ElementsAre(ElementsAre(9, 16), ElementsAre(16),
                                  ElementsAre(400, 32), ElementsAre(32),
                                  ElementsAre(1568, 128), ElementsAre(128),
                                  ElementsAre(128, 10), ElementsAre(10)));
  EXPECT_EQ((*tensors)[2].fan_in, 400);
}

TEST_F(CnnModelTest, InvalidSpecsNameTheField) {
  struct Case {
    v1::ModelSpec spec;
    const char* field;
  };
  std::vector<Case> cases;
  v1::ModelSpec spec = CnnSpec(6, 6, 1, {{2, 3}}, {}, 3);
  spec.clear_image();
  cases.push_back({spec, "model.image"});
  spec = CnnSpec(6, 6, 1, {{2, 3}}, {}, 3);
  spec.set_input_dim(35);
  cases.push_back({spec, "model.image"});
  cases.push_back({CnnSpec(6, 6, 1, {}, {}, 3), "model.conv_layers"});
  cases.push_back(
      {CnnSpec(6, 6, 1, {{2, 4}}, {}, 3), "model.conv_layers[0].kernel_size"});
  cases.push_back(
      {CnnSpec(6, 6, 1, {{0, 3}}, {}, 3), "model.conv_layers[0].filters"});
  // 6 -> 3 -> 1: a third layer has nothing left to pool.
  cases.push_back({CnnSpec(6, 6, 1, {{2, 3}, {2, 3}, {2, 3}}, {}, 3),
                   "model.conv_layers[2]"});
  spec = CnnSpec(6, 6, 1, {{2, 3}}, {}, 3);
  spec.set_kind(v1::ModelSpec::MLP);
  cases.push_back({spec, "model.conv_layers"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    absl::Status status = Model::Create(c.spec, backend_.get()).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.field));
  }
}

struct CnnCase {
  const char* name;
  int height, width, channels;
  std::vector<std::pair<int, int>> convs;
  std::vector<int> hidden;
  v1::Activation activation;
};
void PrintTo(const CnnCase& c, std::ostream* os) { *os << c.name; }

class CnnGradientTest : public CnnModelTest,
                        public ::testing::WithParamInterface<CnnCase> {};

// Every gradient entry against central finite differences of the double
// reference (step 1e-5). Tolerance |analytic - numeric| <= 1e-4 + 1e-3 *
// |numeric| as for the MLP: the float32 passes; random inputs make ties in
// pooling and ReLU kinks within 1e-5 unlikely (a fixed seed keeps it so).
TEST_P(CnnGradientTest, MatchesFiniteDifferences) {
  const CnnCase& c = GetParam();
  const v1::ModelSpec spec = CnnSpec(c.height, c.width, c.channels, c.convs,
                                     c.hidden, 3, c.activation);
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, backend_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937 rng(21);
  const std::vector<std::vector<float>> params =
      RandomParams((*model)->tensors(), &rng, 0.8f);
  ASSERT_TRUE((*model)->SetParameters(params).ok());
  const int batch = 3;
  const std::vector<float> features =
      RandomFeatures(batch * spec.input_dim(), &rng);
  const std::vector<int32_t> labels = {2, 0, 1};

  std::vector<std::vector<float>> grads;
  absl::StatusOr<float> loss =
      (*model)->ComputeGradients(features.data(), labels.data(), batch, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  testing::ExpectLossAndGradientsMatch(
      [&](const std::vector<std::vector<double>>& p) {
        return ReferenceCnnLoss(spec, p, features, labels);
      },
      params, *loss, grads, (*model)->tensors());
}

INSTANTIATE_TEST_SUITE_P(
    Models, CnnGradientTest,
    ::testing::Values(
        CnnCase{"OneConvRelu", 4, 4, 1, {{2, 3}}, {}, v1::RELU},
        CnnCase{"TwoConvsHiddenTanh", 6, 5, 2, {{3, 3}, {2, 1}}, {4}, v1::TANH},
        CnnCase{"Kernel5OddImageSigmoid", 5, 7, 1, {{2, 5}}, {3}, v1::SIGMOID}),
    [](const ::testing::TestParamInfo<CnnCase>& info) {
      return info.param.name;
    });

// The largest |a - b| over all entries, relative to the largest |b|.
double RelativeMaxDifference(const std::vector<std::vector<float>>& a,
                             const std::vector<std::vector<float>>& b) {
  double diff = 0, scale = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    for (size_t i = 0; i < a[t].size(); ++i) {
      diff = std::max(diff, std::abs(double{a[t][i]} - b[t][i]));
      scale = std::max(scale, std::abs(double{b[t][i]}));
    }
  }
  return diff / scale;
}

// fp16 and bf16 steps give the float32 gradients up to the inputs'
// rounding: relative error ~2^-11 (fp16) and ~2^-8 (bf16) per product,
// compounded over the layers; the bounds are a few times that.
TEST_F(CnnModelTest, ReducedPrecisionGradientsAreCloseToFloat32) {
  const v1::ModelSpec spec = CnnSpec(8, 8, 1, {{4, 3}}, {8}, 4);
  std::mt19937 rng(5);
  const int batch = 8;
  const std::vector<float> features =
      RandomFeatures(batch * spec.input_dim(), &rng);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 3, 2, 1, 0};
  auto fp32 = Model::Create(spec, backend_.get());
  ASSERT_TRUE(fp32.ok());
  const std::vector<std::vector<float>> params =
      RandomParams((*fp32)->tensors(), &rng, 0.8f);
  ASSERT_TRUE((*fp32)->SetParameters(params).ok());
  std::vector<std::vector<float>> expected;
  const float loss32 = *(*fp32)->ComputeGradients(
      features.data(), labels.data(), batch, &expected);

  for (const auto& [precision, bound] :
       std::vector<std::pair<Precision, double>>{{Precision::kFp16, 5e-3},
                                                 {Precision::kBf16, 4e-2}}) {
    SCOPED_TRACE(PrecisionName(precision));
    ModelOptions options;
    options.precision = precision;
    auto model = Model::Create(spec, backend_.get(), options);
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE((*model)->SetParameters(params).ok());
    std::vector<std::vector<float>> grads;
    absl::StatusOr<float> loss = (*model)->ComputeGradients(
        features.data(), labels.data(), batch, &grads);
    ASSERT_TRUE(loss.ok());
    EXPECT_NEAR(*loss, loss32, bound * loss32);
    EXPECT_LT(RelativeMaxDifference(grads, expected), bound);
    EXPECT_GT(RelativeMaxDifference(grads, expected), 0)
        << "the inputs were not rounded";
  }
}

// A loss scale of 2^24 makes the scaled gradients overflow fp16 (65504):
// the step is redone at halved scales until they fit, and the gradients
// returned are finite and unscaled.
TEST_F(CnnModelTest, Fp16OverflowIsRecomputedAtASmallerScale) {
  const v1::ModelSpec spec = CnnSpec(8, 8, 1, {{4, 3}}, {8}, 4);
  std::mt19937 rng(6);
  const int batch = 4;
  const std::vector<float> features =
      RandomFeatures(batch * spec.input_dim(), &rng);
  const std::vector<int32_t> labels = {0, 1, 2, 3};
  ModelOptions options;
  options.precision = Precision::kFp16;
  options.initial_loss_scale = LossScaler::kMaxScale;
  options.loss_scale_growth_interval = 1000;
  auto model = Model::Create(spec, backend_.get(), options);
  ASSERT_TRUE(model.ok());
  auto fp32 = Model::Create(spec, backend_.get());
  const std::vector<std::vector<float>> params =
      RandomParams((*model)->tensors(), &rng, 0.8f);
  ASSERT_TRUE((*model)->SetParameters(params).ok());
  ASSERT_TRUE((*fp32)->SetParameters(params).ok());

  std::vector<std::vector<float>> grads, expected;
  ASSERT_TRUE(
      (*model)
          ->ComputeGradients(features.data(), labels.data(), batch, &grads)
          .ok());
  ASSERT_TRUE(
      (*fp32)
          ->ComputeGradients(features.data(), labels.data(), batch, &expected)
          .ok());
  EXPECT_GT((*model)->overflowed_steps(), 0);
  EXPECT_LT((*model)->loss_scale(), LossScaler::kMaxScale);
  for (const auto& g : grads) {
    for (float v : g) ASSERT_TRUE(std::isfinite(v));
  }
  EXPECT_LT(RelativeMaxDifference(grads, expected), 5e-3);
  EXPECT_EQ((*fp32)->loss_scale(), 1.0f);
}

TEST_F(CnnModelTest, SgdLearnsBrightQuadrants) {
  // 4x4 images lit in one of four quadrants; the class is the quadrant.
  const v1::ModelSpec spec = CnnSpec(4, 4, 1, {{4, 3}}, {}, 4);
  auto model = Model::Create(spec, backend_.get());
  ASSERT_TRUE(model.ok());
  std::mt19937 rng(8);
  std::vector<std::vector<float>> params =
      RandomParams((*model)->tensors(), &rng, 0.8f);
  for (auto& p : params) {
    for (float& v : p) v *= 0.5f;
  }
  std::uniform_real_distribution<float> noise(0.0f, 0.2f);
  const int batch = 32;
  std::vector<float> features(batch * 16);
  std::vector<int32_t> labels(batch);
  auto draw = [&] {
    for (int s = 0; s < batch; ++s) {
      labels[s] = s % 4;
      for (int p = 0; p < 16; ++p) {
        const int quadrant = (p / 4 >= 2) * 2 + (p % 4 >= 2);
        features[s * 16 + p] = noise(rng) + (quadrant == labels[s] ? 1 : 0);
      }
    }
  };
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < 200; ++step) {
    draw();
    ASSERT_TRUE((*model)->SetParameters(params).ok());
    ASSERT_TRUE(
        (*model)
            ->ComputeGradients(features.data(), labels.data(), batch, &grads)
            .ok());
    for (size_t t = 0; t < params.size(); ++t) {
      for (size_t i = 0; i < params[t].size(); ++i) {
        params[t][i] -= 0.5f * grads[t][i];
      }
    }
  }
  draw();
  ASSERT_TRUE((*model)->SetParameters(params).ok());
  EXPECT_EQ(*(*model)->CountCorrect(features.data(), labels.data(), batch),
            batch);
}

}  // namespace
}  // namespace ps

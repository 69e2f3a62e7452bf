// Local SGD's round on a real model: H steps of SGD (momentum, L2 decay,
// clipping, accumulation) from w0 and the pushed change w0 - w_H, against a
// double-precision reference of the same formulas.
#include "worker/local_sgd.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/gradient_clipping.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"

namespace ps {
namespace {

constexpr int kDim = 12, kClasses = 5, kBatch = 8;

class LocalSgdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.mutable_model()->set_kind(v1::ModelSpec::MLP);
    spec_.mutable_model()->add_hidden_layers(16);
    spec_.mutable_model()->set_activation(v1::RELU);
    spec_.mutable_model()->set_input_dim(kDim);
    spec_.mutable_model()->set_num_classes(kClasses);
    spec_.set_batch_size(kBatch);
    backend_ = CpuBackend::Create({.num_threads = 1});
    auto model = Model::Create(spec_.model(), backend_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    for (const TensorSpec& t : model_->tensors()) {
      start_.emplace_back(t.num_elems());
      for (float& v : start_.back()) v = Next();
    }
  }

  // A fixed pseudo-random sequence in [-0.5, 0.5).
  float Next() {
    x_ = x_ * 1664525u + 1013904223u;
    return static_cast<float>(x_ >> 8) / static_cast<float>(1 << 24) - 0.5f;
  }

  void MakeData(int samples) {
    features_.resize(static_cast<size_t>(samples) * kDim);
    for (float& v : features_) v = Next();
    labels_.resize(samples);
    for (int i = 0; i < samples; ++i) labels_[i] = (i * 7 + i / 3) % kClasses;
  }

  // The reference: w in double; each step's gradient from the model at
  // float(w) over the step's H-th slice (accumulation's micro-batches are one
  // batch here: the same mean gradient), clipped as the job says, then
  // g += wd w; b = mu b + g; w -= lr b. Returns w0 - w_H.
  std::vector<std::vector<double>> Reference() {
    const v1::SgdOptions& o = spec_.local_sgd().local_optimizer();
    const int per_step = kBatch * std::max(1, spec_.accumulation_steps());
    std::vector<std::vector<double>> w, b;
    for (const auto& t : start_) {
      w.emplace_back(t.begin(), t.end());
      b.emplace_back(t.size(), 0.0);
    }
    std::vector<std::vector<float>> wf(start_.size()), grads;
    for (int h = 0; h < spec_.local_sgd().local_steps(); ++h) {
      for (size_t t = 0; t < w.size(); ++t) {
        wf[t].assign(w[t].begin(), w[t].end());
      }
      EXPECT_TRUE(model_->SetParameters(wf).ok());
      EXPECT_TRUE(model_
                      ->ComputeGradients(features_.data() + h * per_step * kDim,
                                         labels_.data() + h * per_step,
                                         per_step, &grads)
                      .ok());
      ClipGradients(spec_.gradient_clipping(), &grads);
      for (size_t t = 0; t < w.size(); ++t) {
        for (size_t i = 0; i < w[t].size(); ++i) {
          const double g = grads[t][i] + double{o.weight_decay()} * w[t][i];
          b[t][i] = double{o.momentum()} * b[t][i] + g;
          w[t][i] -= double{o.learning_rate()} * b[t][i];
        }
      }
    }
    for (size_t t = 0; t < w.size(); ++t) {
      for (size_t i = 0; i < w[t].size(); ++i) w[t][i] = start_[t][i] - w[t][i];
    }
    return w;
  }

  v1::JobSpec spec_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<float>> start_;
  std::vector<float> features_;
  std::vector<int32_t> labels_;
  uint32_t x_ = 12345;
};

TEST_F(LocalSgdTest, RoundMatchesDoublePrecisionReference) {
  for (const bool with_extras : {false, true}) {
    spec_.mutable_local_sgd()->set_local_steps(5);
    v1::SgdOptions* o = spec_.mutable_local_sgd()->mutable_local_optimizer();
    o->set_learning_rate(0.2f);
    if (with_extras) {
      o->set_momentum(0.9f);
      o->set_weight_decay(0.01f);
      spec_.set_accumulation_steps(2);
      spec_.mutable_gradient_clipping()->set_max_global_norm(0.5f);
    }
    const int samples = 5 * kBatch * (with_extras ? 2 : 1);
    MakeData(samples);
    LocalSgd local(spec_);
    std::vector<std::vector<float>> delta;
    auto loss = local.Round(*model_, start_, features_.data(), labels_.data(),
                            kDim, &delta);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_GT(*loss, 0);
    const auto reference = Reference();
    ASSERT_EQ(delta.size(), reference.size());
    double largest = 0;
    for (size_t t = 0; t < delta.size(); ++t) {
      ASSERT_EQ(delta[t].size(), reference[t].size());
      for (size_t i = 0; i < delta[t].size(); ++i) {
        // float32 updates of values below 1 against double: a few ulps a
        // step, carried through 5 steps' gradients.
        EXPECT_NEAR(delta[t][i], reference[t][i], 2e-6)
            << with_extras << " " << t << " " << i;
        largest = std::max(largest, std::abs(reference[t][i]));
      }
    }
    EXPECT_GT(largest, 1e-2);  // The parameters did move.

    // The momentum buffer starts at zero every round: a second round from
    // the same start pushes the same change.
    std::vector<std::vector<float>> again;
    ASSERT_TRUE(local
                    .Round(*model_, start_, features_.data(), labels_.data(),
                           kDim, &again)
                    .ok());
    EXPECT_EQ(again, delta);
  }
}

TEST_F(LocalSgdTest, OneStepPushesTheRateTimesTheGradient) {
  spec_.mutable_local_sgd()->set_local_steps(1);
  spec_.mutable_local_sgd()->mutable_local_optimizer()->set_learning_rate(
      0.05f);
  spec_.mutable_local_sgd()->mutable_local_optimizer()->set_momentum(0.9f);
  MakeData(kBatch);
  LocalSgd local(spec_);
  std::vector<std::vector<float>> delta, grads;
  ASSERT_TRUE(local
                  .Round(*model_, start_, features_.data(), labels_.data(),
                         kDim, &delta)
                  .ok());
  ASSERT_TRUE(model_->SetParameters(start_).ok());
  ASSERT_TRUE(
      model_->ComputeGradients(features_.data(), labels_.data(), kBatch, &grads)
          .ok());
  for (size_t t = 0; t < delta.size(); ++t) {
    for (size_t i = 0; i < delta[t].size(); ++i) {
      // w0 - (w0 - lr g) in float32: lr g up to the rounding of w0's ulp.
      EXPECT_NEAR(delta[t][i], 0.05f * grads[t][i], 2e-7) << t << " " << i;
    }
  }
  EXPECT_TRUE(LocalSgdEnabled(spec_));
  EXPECT_EQ(LocalSteps(spec_), 1);
  spec_.clear_local_sgd();
  EXPECT_FALSE(LocalSgdEnabled(spec_));
  EXPECT_EQ(LocalSteps(spec_), 1);
}

}  // namespace
}  // namespace ps

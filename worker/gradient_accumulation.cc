#include "worker/gradient_accumulation.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<float> ComputeAccumulatedGradients(
    Model& model, const float* features, const int32_t* labels, int input_dim,
    int micro_batch, int micro_batches, std::vector<std::vector<float>>* grads,
    std::vector<std::vector<float>>* scratch) {
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("accumulation_steps: must be >= 1, got ", micro_batches));
  }
  if (micro_batches == 1) {
    return model.ComputeGradients(features, labels, micro_batch, grads);
  }
  double loss = 0;
  for (int j = 0; j < micro_batches; ++j) {
    const int64_t first = static_cast<int64_t>(j) * micro_batch;
    std::vector<std::vector<float>>* out = j == 0 ? grads : scratch;
    auto micro_loss = model.ComputeGradients(features + first * input_dim,
                                             labels + first, micro_batch, out);
    if (!micro_loss.ok()) return micro_loss.status();
    loss += *micro_loss;
    if (j == 0) continue;
    for (size_t t = 0; t < grads->size(); ++t) {
      float* __restrict sum = (*grads)[t].data();
      const float* __restrict add = (*scratch)[t].data();
      for (size_t i = 0; i < (*grads)[t].size(); ++i) sum[i] += add[i];
    }
  }
  const float scale = 1.0f / static_cast<float>(micro_batches);
  for (std::vector<float>& tensor : *grads) {
    for (float& g : tensor) g *= scale;
  }
  return static_cast<float>(loss / micro_batches);
}

}  // namespace ps

#include "worker/gradient_clipping.h"

#include <algorithm>
#include <cmath>

namespace ps {

ClipResult ClipGradients(const v1::GradientClippingSpec& spec,
                         std::vector<std::vector<float>>* grads) {
  ClipResult result;
  const float max_value = spec.max_value();
  if (max_value > 0) {
    for (std::vector<float>& tensor : *grads) {
      for (float& g : tensor) {
        if (g > max_value || g < -max_value) {
          g = std::clamp(g, -max_value, max_value);
          ++result.values_clipped;
        }
      }
    }
  }
  const double max_norm = spec.max_global_norm();
  if (max_norm <= 0) return result;
  double sum = 0;
  for (const std::vector<float>& tensor : *grads) {
    for (float g : tensor) sum += static_cast<double>(g) * g;
  }
  result.norm = std::sqrt(sum);
  if (result.norm > max_norm) {
    const float scale = static_cast<float>(max_norm / result.norm);
    for (std::vector<float>& tensor : *grads) {
      for (float& g : tensor) g *= scale;
    }
    result.scaled = true;
  }
  return result;
}

}  // namespace ps

#include "server/gradient_apply.h"

#include <algorithm>
#include <vector>

namespace ps {

void ApplyPushedGradient(const Optimizer& optimizer, const WireBytes& data,
                         v1::Precision encoding, std::span<float> values,
                         std::span<float> state, int64_t* step,
                         float learning_rate) {
  if (optimizer.range_wise()) {
    ForEachGradientRun(
        data, encoding, [&](size_t first, std::span<const float> g) {
          optimizer.ApplyRange(values, g, first, state, *step, learning_rate);
        });
    ++*step;
    return;
  }
  std::vector<float> whole(values.size(), 0.0f);
  ForEachGradientRun(data, encoding,
                     [&](size_t first, std::span<const float> g) {
                       std::copy(g.begin(), g.end(), whole.begin() + first);
                     });
  optimizer.Apply(values, whole, state, step, learning_rate);
}

}  // namespace ps

#include "server/gradient_apply.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ps {

void ApplyPushedGradient(const Optimizer& optimizer, const WireBytes& data,
                         v1::Precision encoding, std::span<float> values,
                         std::span<float> state, int64_t* step,
                         float learning_rate) {
  if (encoding == v1::FP32 && data.pieces().size() == 1 &&
      reinterpret_cast<uintptr_t>(data.pieces()[0].data()) % alignof(float) ==
          0) {
    // Float32 in one aligned piece (a BSP clock's sum, most records): the
    // optimizer reads it in place. Apply gives what ApplyRange over runs
    // gives (Optimizer::ApplyRange), so the result does not depend on the
    // path.
    const std::string_view piece = data.pieces()[0];
    optimizer.Apply(values,
                    {reinterpret_cast<const float*>(piece.data()),
                     piece.size() / sizeof(float)},
                    state, step, learning_rate);
    return;
  }
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

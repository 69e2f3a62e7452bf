// Shared by the optimizer implementations (server/optimizer*.cc): kernel
// helpers and the factories Optimizer::Create calls. Not for other users.
#ifndef PS_SERVER_OPTIMIZER_INTERNAL_H_
#define PS_SERVER_OPTIMIZER_INTERNAL_H_

#include <cmath>
#include <cstddef>
#include <memory>
#include <span>

#include "common/logging.h"
#include "ps/v1/job.pb.h"
#include "server/optimizer.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace ps::optimizer_internal {

// The kernels walk blocks in chunks of kChunk floats through __restrict
// pointers: a fixed trip count without possible aliasing is what GCC's -O2
// ("very cheap" cost model) vectorises. The remainder goes through the same
// arithmetic one float at a time.
inline constexpr size_t kChunk = 16;

// Square roots of kChunk floats. std::sqrt may set errno, which keeps GCC
// from vectorising it without -fno-math-errno; SSE's sqrtps does not.
inline void SqrtChunk(const float* __restrict in, float* __restrict out) {
#if defined(__SSE__)
  for (size_t j = 0; j < kChunk; j += 4) {
    _mm_storeu_ps(out + j, _mm_sqrt_ps(_mm_loadu_ps(in + j)));
  }
#else
  for (size_t j = 0; j < kChunk; ++j) out[j] = std::sqrt(in[j]);
#endif
}

// PS_CHECKs that `grad` at `begin` lies within `params` and that `state`
// holds `slots` block-lengths.
inline void CheckSizes(std::span<float> params, std::span<const float> grad,
                       size_t begin, std::span<float> state, int slots) {
  PS_CHECK(begin <= params.size() && grad.size() <= params.size() - begin,
           "optimizer: gradient of ", grad.size(), " floats at ", begin,
           " for ", params.size(), " parameters");
  PS_CHECK(state.size() == static_cast<size_t>(slots) * params.size(),
           "optimizer: state of ", state.size(), " floats, want ",
           static_cast<size_t>(slots) * params.size());
}

// Adam's bias corrections of update number step + 1, in double: 1 - beta^t
// loses precision in float for beta2 near 1.
struct BiasCorrection {
  double bias1;  // 1 - beta1^t
  double bias2;  // 1 - beta2^t
};
inline BiasCorrection BiasCorrectionAt(float beta1, float beta2, int64_t step) {
  const double t = static_cast<double>(step + 1);
  return {1.0 - std::pow(static_cast<double>(beta1), t),
          1.0 - std::pow(static_cast<double>(beta2), t)};
}

// Factories of the kinds in optimizer_adaptive.cc and optimizer_lamb.cc;
// the options are valid and their defaults applied.
std::unique_ptr<Optimizer> MakeAdamW(const v1::AdamWOptions& options);
std::unique_ptr<Optimizer> MakeRmsprop(const v1::RmspropOptions& options);
std::unique_ptr<Optimizer> MakeAdagrad(const v1::AdagradOptions& options);
std::unique_ptr<Optimizer> MakeLamb(const v1::LambOptions& options);

}  // namespace ps::optimizer_internal

#endif  // PS_SERVER_OPTIMIZER_INTERNAL_H_

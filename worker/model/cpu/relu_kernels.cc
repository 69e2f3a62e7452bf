#include "worker/model/cpu/relu_kernels.h"

#include <algorithm>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace ps {

void ReluBiasRow(const float* x, const float* bias, int64_t n, float* y) {
  int64_t i = 0;
#if defined(__SSE__)
  const __m128 zero = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_add_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(bias + i));
    // maxps(a, b) is a > b ? a : b: with a = 0 that is std::max(v, 0.0f)'s
    // v < 0 ? 0 : v, -0.0 and NaN included.
    _mm_storeu_ps(y + i, _mm_max_ps(zero, v));
  }
#endif
  for (; i < n; ++i) y[i] = std::max(x[i] + bias[i], 0.0f);
}

void ReluGrad(const float* grad_out, const float* out, int64_t n,
              float* grad_in) {
  int64_t i = 0;
#if defined(__SSE__)
  const __m128 zero = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) {
    // All ones where out > 0 (false for NaN), else +0.0.
    const __m128 keep = _mm_cmpgt_ps(_mm_loadu_ps(out + i), zero);
    _mm_storeu_ps(grad_in + i, _mm_and_ps(keep, _mm_loadu_ps(grad_out + i)));
  }
#endif
  for (; i < n; ++i) grad_in[i] = out[i] > 0.0f ? grad_out[i] : 0.0f;
}

}  // namespace ps

// Dynamic loss scaling for fp16 mixed-precision training.
#ifndef PS_WORKER_LOSS_SCALER_H_
#define PS_WORKER_LOSS_SCALER_H_

#include <algorithm>
#include <cstdint>

namespace ps {

// The loss scale of fp16 training: gradients are computed for the loss times
// scale() (so that small ones do not underflow fp16's 2^-24) and divided by it
// afterwards. A step whose gradients overflow (inf or NaN) halves the scale
// and is recomputed; `growth_interval` finite steps in a row double it, up to
// 2^24. With scale 1 an overflow cannot be helped: the step is kept as it is.
// Not thread-safe.
class LossScaler {
 public:
  static constexpr float kMaxScale = 16777216.0f;  // 2^24.

  LossScaler(float initial_scale, int growth_interval)
      : scale_(std::clamp(initial_scale, 1.0f, kMaxScale)),
        growth_interval_(std::max(growth_interval, 1)) {}

  float scale() const { return scale_; }
  // Steps whose gradients overflowed at the scale of the time.
  int64_t overflows() const { return overflows_; }

  // Records a step computed at scale(). Returns true if its gradients must be
  // recomputed at the new, halved, scale.
  bool Update(bool gradients_finite) {
    if (gradients_finite) {
      if (++finite_steps_ >= growth_interval_) {
        scale_ = std::min(scale_ * 2.0f, kMaxScale);
        finite_steps_ = 0;
      }
      return false;
    }
    ++overflows_;
    finite_steps_ = 0;
    if (scale_ <= 1.0f) return false;
    scale_ = std::max(scale_ * 0.5f, 1.0f);
    return true;
  }

 private:
  float scale_;
  const int growth_interval_;
  int finite_steps_ = 0;
  int64_t overflows_ = 0;
};

}  // namespace ps

#endif  // PS_WORKER_LOSS_SCALER_H_

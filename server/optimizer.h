// Server-side optimizers (design §1): SGD (optionally with momentum) and Adam,
// applied block by block to the parameters a server holds.
#ifndef PS_SERVER_OPTIMIZER_H_
#define PS_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Updates a block of parameters from a gradient. Immutable once created:
// every method is const and thread-safe, and different blocks may be updated
// concurrently.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Builds the optimizer `spec` selects, applying the documented defaults
  // (Adam: beta1 0 -> 0.9, beta2 0 -> 0.999, epsilon 0 -> 1e-8). Errors:
  // INVALID_ARGUMENT naming the field (optimizer.sgd.learning_rate must be
  // > 0; momentum in [0, 1); betas in [0, 1); epsilon > 0; weight_decay
  // >= 0; all finite), or "optimizer: set sgd or adam" when neither is set.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const v1::OptimizerSpec& spec);

  // Floats of state kept per parameter: SGD 0 (1 with momentum: the velocity),
  // Adam 2 (m then v, each block-length, concatenated:
  // state = [m_0..m_{n-1}, v_0..v_{n-1}]).
  virtual int state_slots() const = 0;

  // Applies one update to `params` from `grad` (same length); `state` holds
  // state_slots() * params.size() floats (zero-initialised before the first
  // update of a block); *step counts the updates applied before this one and
  // is incremented. The three spans must not overlap. Sizes that do not match
  // are a programmer error (PS_CHECK). Thread-safe.
  void Apply(std::span<float> params, std::span<const float> grad,
             std::span<float> state, int64_t* step) const;

  // Applies update number `step` (the count of updates applied before it) to
  // params[begin, begin + grad.size()) only: `params` and `state` are the
  // whole block's, `grad` the gradient of that range. Applying a block range
  // by range, with the same `step`, gives exactly what one Apply gives (each
  // value's update depends on nothing but its own gradient and state); the
  // caller then counts the update (++step). This lets a server apply a
  // gradient straight from the buffers it arrived in. Ranges outside the block
  // or sizes that do not match are a programmer error (PS_CHECK).
  // Thread-safe; distinct ranges of one block may be updated concurrently.
  virtual void ApplyRange(std::span<float> params, std::span<const float> grad,
                          size_t begin, std::span<float> state,
                          int64_t step) const = 0;
};

}  // namespace ps

#endif  // PS_SERVER_OPTIMIZER_H_

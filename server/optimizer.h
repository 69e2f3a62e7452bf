// Server-side optimizers (docs/training.md): SGD (optionally with
// momentum), Adam, AdamW, RMSprop, Adagrad and LAMB, applied block by block
// to the parameters a server holds, at a learning rate the caller gives (the
// job's schedule at the update's clock, common/learning_rate_schedule.h).
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

  // Builds the optimizer `spec` selects, as given: the coordinator completes a
  // job's spec with the documented defaults once, at submit
  // (ApplyJobSpecDefaults, which calls ApplyOptimizerDefaults: Adam's beta1
  // 0 -> 0.9 and so on), so a 0 here is a 0. Errors:
  // INVALID_ARGUMENT naming the field (ValidateOptimizerSpec: e.g.
  // "optimizer.sgd.learning_rate: must be > 0, got 0"), or "optimizer: set
  // one of sgd, adam, adamw, rmsprop, adagrad, lamb" when none is set.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const v1::OptimizerSpec& spec);

  // Floats of state kept per parameter, each slot block-length and the slots
  // concatenated: SGD 0 (1 with momentum: the velocity); Adam, AdamW and LAMB
  // 2 (m then v: state = [m_0..m_{n-1}, v_0..v_{n-1}]); RMSprop 1 (v; 2 with
  // momentum: v then the velocity); Adagrad 1 (the sum of squared gradients
  // less initial_accumulator_value, so that zero-initialised state is right).
  virtual int state_slots() const = 0;

  // The spec's learning_rate: the rate before any schedule.
  float learning_rate() const { return learning_rate_; }

  // True when a block may be updated range by range (ApplyRange on parts of
  // it). False for LAMB, whose trust ratio takes norms over the whole block:
  // its ApplyRange must be given the whole block's gradient at once.
  virtual bool range_wise() const { return true; }

  // Applies one update to `params` from `grad` (same length) at
  // `learning_rate` (> 0); `state` holds state_slots() * params.size()
  // floats (zero-initialised before the first update of a block); *step
  // counts the updates applied before this one and is incremented. The three
  // spans must not overlap. Sizes that do not match are a programmer error
  // (PS_CHECK). Thread-safe.
  void Apply(std::span<float> params, std::span<const float> grad,
             std::span<float> state, int64_t* step, float learning_rate) const;
  // The same at learning_rate().
  void Apply(std::span<float> params, std::span<const float> grad,
             std::span<float> state, int64_t* step) const {
    Apply(params, grad, state, step, learning_rate_);
  }

  // Applies update number `step` (the count of updates applied before it) at
  // `learning_rate` to params[begin, begin + grad.size()) only: `params` and
  // `state` are the whole block's, `grad` the gradient of that range. When
  // range_wise(), applying a block range by range, with the same `step`,
  // gives exactly what one Apply gives (each value's update depends on
  // nothing but its own gradient and state); the caller then counts the
  // update (++step). This lets a server apply a gradient straight from the
  // buffers it arrived in. Ranges outside the block, sizes that do not match,
  // and a part of a block when !range_wise() are programmer errors
  // (PS_CHECK). Thread-safe; distinct ranges of one block may be updated
  // concurrently.
  virtual void ApplyRange(std::span<float> params, std::span<const float> grad,
                          size_t begin, std::span<float> state, int64_t step,
                          float learning_rate) const = 0;
  // The same at learning_rate().
  void ApplyRange(std::span<float> params, std::span<const float> grad,
                  size_t begin, std::span<float> state, int64_t step) const {
    ApplyRange(params, grad, begin, state, step, learning_rate_);
  }

 protected:
  explicit Optimizer(float learning_rate) : learning_rate_(learning_rate) {}

 private:
  const float learning_rate_;
};

}  // namespace ps

#endif  // PS_SERVER_OPTIMIZER_H_

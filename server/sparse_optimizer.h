// The optimizers of sparse tables (SparseOptimizerSpec in
// proto/ps/v1/job.proto; formulas in docs/sparse.md, "Rows, optimizers,
// admission and eviction"): one step changes one row, its values and its
// optimizer state, which the table keeps inline after the values.
#ifndef PS_SERVER_SPARSE_OPTIMIZER_H_
#define PS_SERVER_SPARSE_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Immutable after Create; thread-safe.
class SparseOptimizer {
 public:
  // The optimizer kinds, numbered as the oneof's fields (also the kind byte
  // of the bucket format, server/sparse_bucket_codec.h).
  enum class Kind : uint8_t {
    kSgd = 1,
    kAdagrad = 2,
    kRowwiseAdagrad = 3,
    kLazyAdam = 4,
    kFtrl = 5,
  };

  // `spec` taken as given (defaults filled at submit: a 0 is a 0); `dim` 1 to
  // 1024. Errors: INVALID_ARGUMENT naming the field: no optimizer set, a
  // learning rate (FTRL: alpha) not > 0 and finite, SGD momentum or weight
  // decay, Adam weight decay, a negative epsilon, weight decay, accumulator,
  // beta, l1 or l2, Adam betas outside [0, 1).
  static absl::StatusOr<SparseOptimizer> Create(
      const v1::SparseOptimizerSpec& spec, int dim);

  Kind kind() const { return kind_; }
  // The optimizer's own learning rate (FTRL: alpha).
  float learning_rate() const { return lr_; }
  // Floats of optimizer state per row: SGD 0, Adagrad dim, row-wise Adagrad
  // 1, lazy Adam 2 * dim (m then v), FTRL 2 * dim (z then n). A new row's
  // state is all zeros.
  int state_floats() const { return state_floats_; }

  // One step on one row: values[0..dim) and state[0..state_floats) change by
  // gradient grad[0..dim) at learning rate learning_rate() * lr_factor.
  // `step` is the row's update count including this one (>= 1; lazy Adam's
  // bias correction). FTRL at an effective rate of 0 leaves the row as it
  // is (its formula divides by the rate).
  void Step(float* values, float* state, const float* grad, int64_t step,
            float lr_factor) const;

 private:
  SparseOptimizer() = default;

  void Adagrad(float* p, float* s, const float* g, float lr) const;
  void RowwiseAdagrad(float* p, float* s, const float* g, float lr) const;
  void LazyAdam(float* p, float* m, const float* g, int64_t step,
                float lr) const;
  void Ftrl(float* w, float* z, const float* g, float alpha) const;

  Kind kind_ = Kind::kSgd;
  int dim_ = 0;
  int state_floats_ = 0;
  float lr_ = 0;
  float epsilon_ = 0;                 // Adagrads, Adam.
  float weight_decay_ = 0;            // Adagrads.
  float initial_ = 0;                 // Adagrads: initial_accumulator_value.
  float beta1_ = 0, beta2_ = 0;       // Adam.
  float beta_ = 0, l1_ = 0, l2_ = 0;  // FTRL.
};

}  // namespace ps

#endif  // PS_SERVER_SPARSE_OPTIMIZER_H_

// Local SGD on the worker, the worker's half of federated averaging
// (docs/training.md, "Local SGD and federated averaging"): from the pulled
// parameters w0 the worker takes H steps of plain SGD on its own copy and
// pushes the change w0 - w_H, which the servers average under BSP.
#ifndef PS_WORKER_LOCAL_SGD_H_
#define PS_WORKER_LOCAL_SGD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"
#include "worker/model/model.h"

namespace ps {

// Whether a job trains with local SGD (spec.local_sgd.local_steps >= 1).
bool LocalSgdEnabled(const v1::JobSpec& spec);

// Local steps per clock: spec.local_sgd.local_steps, or 1 when local SGD is
// off. A clock consumes LocalSteps * accumulation_steps * batch_size samples
// of the worker's part.
int LocalSteps(const v1::JobSpec& spec);

// One worker's local rounds. The buffers are kept between rounds; the
// momentum buffer starts at zero every round. Not thread-safe: the trainer's
// thread owns it.
class LocalSgd {
 public:
  // `spec` must be valid (ValidateJobSpec) with local SGD enabled.
  explicit LocalSgd(const v1::JobSpec& spec);

  // One round from `start` (w0): for h = 0 .. H-1, sets the model's
  // parameters to w_h, computes the mean gradient g of local step h's
  // accumulation_steps micro-batches of batch_size samples (the h-th slice
  // of `features` / `labels`, which hold H * accumulation_steps * batch_size
  // samples), clips it as the job asks, and updates on the host, in float32:
  // g <- g + wd * w; b <- mu * b + g; w <- w - lr * b (without momentum
  // w <- w - lr * g). Then writes delta = w0 - w_H into `delta` (resized to
  // match). Returns the mean of the H steps' losses. Errors: the model's.
  absl::StatusOr<float> Round(Model& model,
                              const std::vector<std::vector<float>>& start,
                              const float* features, const int32_t* labels,
                              int input_dim,
                              std::vector<std::vector<float>>* delta);

  // The model's timings summed over the last round's steps (Model's
  // step_timing covers only its last step).
  const StepTiming& timing() const { return timing_; }

 private:
  const v1::SgdOptions optimizer_;
  const v1::GradientClippingSpec clipping_;
  const int local_steps_;
  const int micro_batch_;
  const int micro_batches_;
  StepTiming timing_;
  std::vector<std::vector<float>> params_;    // w_h.
  std::vector<std::vector<float>> grads_;     // One step's gradient.
  std::vector<std::vector<float>> scratch_;   // Accumulation's.
  std::vector<std::vector<float>> momentum_;  // b, with momentum only.
};

}  // namespace ps

#endif  // PS_WORKER_LOCAL_SGD_H_

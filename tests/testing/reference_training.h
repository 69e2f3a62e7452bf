// The one-process reference that the equivalence tests train beside real
// servers (bsp_equivalence_test, accumulation_equivalence_test,
// elastic_bsp_equivalence_test): the job's initial parameters as the servers
// draw them, its optimizer with zeroed state, its training set (IDX) and its
// model on a one-thread CPU backend, stepped one whole batch at a time.
#ifndef PS_TESTS_TESTING_REFERENCE_TRAINING_H_
#define PS_TESTS_TESTING_REFERENCE_TRAINING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/idx_reader.h"
#include "common/learning_rate_schedule.h"
#include "common/logging.h"
#include "server/optimizer.h"
#include "tests/testing/bsp_training.h"
#include "worker/batcher.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"

namespace ps::testing {

// Not thread-safe. Failures (an unreadable data set, a spec the model or
// optimizer refuses) are PS_CHECKs.
class ReferenceTraining {
 public:
  explicit ReferenceTraining(const v1::JobSpec& spec)
      : params_(InitialParameters(spec)), steps_(params_.size(), 0) {
    auto optimizer = Optimizer::Create(spec.optimizer());
    PS_CHECK(optimizer.ok());
    optimizer_ = *std::move(optimizer);
    for (const auto& p : params_) {
      state_.emplace_back(p.size() * optimizer_->state_slots(), 0.0f);
    }
    auto data = ReadIdxDataset(spec.dataset().train_images(),
                               spec.dataset().train_labels(),
                               spec.dataset().max_train_samples());
    PS_CHECK(data.ok());
    data_ = *std::move(data);
    backend_ = CpuBackend::Create({.num_threads = 1});
    auto model = Model::Create(spec.model(), backend_.get());
    PS_CHECK(model.ok());
    model_ = *std::move(model);
  }

  // The training set.
  const Dataset& data() const { return data_; }
  // The parameters after the steps so far.
  const std::vector<std::vector<float>>& params() const { return params_; }

  // One step on `count` samples: the model's mean gradient at the current
  // parameters, applied to every tensor by the optimizer at `rate` (at its
  // own learning rate without one).
  void Step(const float* features, const int32_t* labels, int count,
            std::optional<float> rate = std::nullopt) {
    PS_CHECK(model_->SetParameters(params_).ok());
    PS_CHECK(model_->ComputeGradients(features, labels, count, &grads_).ok());
    for (size_t t = 0; t < params_.size(); ++t) {
      if (rate.has_value()) {
        optimizer_->Apply(params_[t], grads_[t], state_[t], &steps_[t], *rate);
      } else {
        optimizer_->Apply(params_[t], grads_[t], state_[t], &steps_[t]);
      }
    }
  }

 private:
  std::vector<std::vector<float>> params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::vector<float>> state_;
  std::vector<int64_t> steps_;
  Dataset data_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Model> model_;
  std::vector<std::vector<float>> grads_;
};

// `steps` clocks of a BSP job of `workers` workers that each train
// `per_worker` samples a clock, in one process: per clock one batch of every
// worker's next `per_worker` samples of epoch 0 (DataPartition's order), in
// worker order. `scheduled`: each clock at the schedule's rate
// (LearningRateAt), else at the optimizer's own.
inline std::vector<std::vector<float>> TrainOneBatchPerClock(
    const v1::JobSpec& spec, int workers, int per_worker, int steps,
    bool scheduled) {
  ReferenceTraining reference(spec);
  const Dataset& data = reference.data();
  auto partition = DataPartition::Create(data.num_samples, workers);
  PS_CHECK(partition.ok());
  std::vector<std::vector<int64_t>> orders;
  for (int w = 0; w < workers; ++w) {
    orders.push_back(partition->EpochOrder(spec.seed(), 0, w));
  }
  std::vector<float> features(workers * per_worker * data.dim);
  std::vector<int32_t> labels(workers * per_worker);
  for (int step = 0; step < steps; ++step) {
    for (int w = 0; w < workers; ++w) {
      GatherBatch(data,
                  std::span<const int64_t>(orders[w]).subspan(step * per_worker,
                                                              per_worker),
                  features.data() + w * per_worker * data.dim,
                  labels.data() + w * per_worker);
    }
    std::optional<float> rate;
    if (scheduled) rate = LearningRateAt(spec.optimizer(), step);
    reference.Step(features.data(), labels.data(), workers * per_worker, rate);
  }
  return reference.params();
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_REFERENCE_TRAINING_H_

// Trainer: the step metrics it exports (worker/worker_metrics.h): each
// step's timings, the parameter client's counters, gradient clipping and
// the pushes acknowledged (with the ack log of fault tests).
#include <algorithm>

#include "worker/trainer.h"

namespace ps {

void Trainer::RecordClipping(const ClipResult& clip) {
  metrics_->gradient_norm.Set(clip.norm);
  if (clip.scaled) metrics_->clipped_steps.Increment();
  if (clip.values_clipped > 0) {
    metrics_->clipped_values.Increment(
        static_cast<double>(clip.values_clipped));
  }
}

void Trainer::RecordStepMetrics(const StepTimes& times, int batch,
                                CounterMarks* marks) {
  // Adds to `metric` what a running total gained since `*last`. The total is
  // read once: the pipeline's threads may be adding to it.
  auto count = [](prometheus::Counter& metric, int64_t total, int64_t* last) {
    metric.Increment(total - *last);
    *last = total;
  };
  static const StepTiming kUntimed{};
  const StepTiming& timing = local_sgd_ != nullptr ? local_sgd_->timing()
                             : model_ != nullptr   ? model_->step_timing()
                                                   : kUntimed;
  metrics_->pull_seconds.Observe(
      absl::ToDoubleSeconds(times.pulled - times.start));
  metrics_->compute_seconds.Observe(absl::ToDoubleSeconds(timing.compute));
  metrics_->copy_to_device_seconds.Observe(
      absl::ToDoubleSeconds(timing.to_device));
  metrics_->copy_to_host_seconds.Observe(absl::ToDoubleSeconds(timing.to_host));
  metrics_->steps.Increment();
  if (model_ != nullptr) {
    metrics_->loss_scale.Set(model_->loss_scale());
    count(metrics_->overflowed_steps, model_->overflowed_steps(),
          &marks->overflowed_steps);
  }
  count(metrics_->pulls_made, client_->pulls_made(), &marks->pulls_made);
  count(metrics_->pulls_saved, client_->pulls_saved(), &marks->pulls_saved);
  count(metrics_->push_bytes, client_->pushed_bytes(), &marks->pushed_bytes);
  count(metrics_->pull_bytes, client_->pulled_bytes(), &marks->pulled_bytes);
  metrics_->samples.Increment(batch);
}

void Trainer::RecordPush(int64_t clock, absl::Duration took,
                         absl::Duration blocked) {
  acked_clock_ = std::max(acked_clock_, clock);
  if (ack_log_.is_open()) {
    ack_log_ << assignment_.job_id() << " " << assignment_.index() << " "
             << clock << std::endl;  // Flushed: the line must survive kill -9.
  }
  metrics_->push_seconds.Observe(absl::ToDoubleSeconds(took));
  metrics_->push_blocked_seconds.Observe(absl::ToDoubleSeconds(blocked));
}

}  // namespace ps

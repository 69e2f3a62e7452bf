// Trainer: the step loop. The clocks of a plan, epoch by epoch, one step
// each (pull, compute, push), the pull made ahead and the push left in
// flight as the options say, and the progress report at each interval's and
// each epoch's end.
#include <span>

#include "common/status_macros.h"
#include "worker/batcher.h"
#include "worker/gradient_accumulation.h"
#include "worker/gradient_clipping.h"
#include "worker/local_sgd.h"
#include "worker/trainer.h"

namespace ps {

absl::Status Trainer::RunClocks(const Plan& plan, Pipeline& pipeline,
                                StepFunction step_at) {
  const v1::JobSpec& spec = assignment_.spec();
  const int batch = SamplesPerClockOf(spec);
  Interval interval{.start = absl::Now()};
  CounterMarks marks;
  int64_t clock = plan.resume_clock;
  for (int epoch = clock / plan.steps; epoch < spec.epochs(); ++epoch) {
    const std::vector<int64_t> order =
        plan.partition.EpochOrder(spec.seed(), epoch, plan.worker);
    for (int64_t step = clock % plan.steps; step < plan.steps;
         ++step, ++clock) {
      if (stop_) return absl::CancelledError("training stopped");
      const auto batch_order =
          std::span<const int64_t>(order).subspan(step * batch, batch);
      // Not across an epoch's end, where worker 0 pulls to evaluate.
      const bool prefetch_next = step + 1 < plan.steps;
      PS_ASSIGN_OR_RETURN(StepTimes times,
                          step_at(batch_order, clock, prefetch_next));
      RecordStepMetrics(times, batch, &marks);
      const bool epoch_end = step + 1 == plan.steps;
      PS_RETURN_IF_ERROR(AddToInterval(times, epoch, clock, epoch_end, plan,
                                       &interval, pipeline));
    }
  }
  if (plan.resume_clock >= plan.total_clocks) {
    // The previous holder of this place pushed everything before it was lost;
    // only the end of the last epoch remains.
    return EndAfterLastClock(plan.total_clocks);
  }
  return absl::OkStatus();
}

absl::Status Trainer::AddToInterval(const StepTimes& times, int epoch,
                                    int64_t clock, bool epoch_end,
                                    const Plan& plan, Interval* interval,
                                    Pipeline& pipeline) {
  interval->loss += times.loss;
  ++interval->steps;
  if (times.pushed - interval->start >= options_.report_interval || epoch_end) {
    PS_RETURN_IF_ERROR(ReportInterval(epoch, clock, epoch_end, plan,
                                      times.pushed, interval, pipeline));
  }
  return absl::OkStatus();
}

void Trainer::StartPipeline(int batch, int dim, Pipeline& pipeline) {
  pipeline.features.resize(static_cast<size_t>(batch) * dim);
  pipeline.labels.resize(batch);
  if (options_.overlap_push) {
    // A failed push ends training, and this worker's clock can no longer
    // advance: a pull made ahead would wait on the servers for it until its
    // deadline and retries. Cancelling the client ends it at once (with
    // CANCELLED: PullFailed reports the push's error instead).
    pipeline.pusher.emplace(client_.get(),
                            [this](const absl::Status&) { client_->Cancel(); });
  }
  if (options_.prefetch_pull) pipeline.puller.emplace(client_.get());
}

void Trainer::EndCallsInFlight(Pipeline& pipeline) {
  // Training ends with a call still in flight only on an error (a refusal
  // under a new membership among them), and then a pull made ahead may be
  // parked on a server for a push that will not come: end it rather than
  // wait out its deadline and retries. (Runs before the pusher and puller
  // wait for their calls.)
  if ((pipeline.puller.has_value() && pipeline.puller->busy()) ||
      (pipeline.pusher.has_value() && pipeline.pusher->busy())) {
    client_->Cancel();
  }
}

absl::Status Trainer::EndAfterLastClock(int64_t total_clocks) {
  v1::ProgressReport report;
  report.set_epoch(assignment_.spec().epochs());
  report.set_clock(total_clocks);
  report.set_total_clocks(total_clocks);
  report.set_test_accuracy(-1);
  report.set_test_auc(-1);
  report.set_test_log_loss(-1);
  return EndEpoch(std::move(report), /*last=*/true);
}

absl::StatusOr<Trainer::StepTimes> Trainer::RunStep(
    const Dataset& train, std::span<const int64_t> batch_order, int64_t clock,
    bool prefetch_next, Pipeline& pipeline) {
  StepTimes times;
  times.start = absl::Now();
  std::vector<std::vector<float>>& step_params = pipeline.pulled[clock % 2];
  if (pipeline.puller.has_value() && pipeline.puller->busy()) {
    // Made while the previous step computed.
    if (auto s = pipeline.puller->Wait().status; !s.ok()) {
      return PullFailed(s, pipeline);
    }
  } else if (auto s = client_->Pull(clock, &step_params); !s.ok()) {
    return PullFailed(s, pipeline);
  }
  times.pulled = absl::Now();
  if (pipeline.puller.has_value() && prefetch_next) {
    pipeline.puller->Start(clock + 1, &pipeline.pulled[(clock + 1) % 2]);
  }
  GatherBatch(train, batch_order, pipeline.features.data(),
              pipeline.labels.data());
  std::vector<std::vector<float>>& step_grads = pipeline.grads[clock % 2];
  if (local_sgd_ != nullptr) {
    // H local steps from the pulled parameters; the push carries their
    // change (docs/training.md, "Local SGD and federated averaging").
    PS_ASSIGN_OR_RETURN(
        times.loss,
        local_sgd_->Round(*model_, step_params, pipeline.features.data(),
                          pipeline.labels.data(), train.dim, &step_grads));
  } else {
    PS_RETURN_IF_ERROR(model_->UseParameters(step_params));
    // Accumulation and clipping hooks (docs/training.md).
    const v1::JobSpec& spec = assignment_.spec();
    PS_ASSIGN_OR_RETURN(
        times.loss,
        ComputeAccumulatedGradients(*model_, pipeline.features.data(),
                                    pipeline.labels.data(), train.dim,
                                    spec.batch_size(), AccumulationSteps(spec),
                                    &step_grads, &pipeline.micro_grads));
    RecordClipping(ClipGradients(spec.gradient_clipping(), &step_grads));
  }
  times.computed = absl::Now();
  if (pipeline.pusher.has_value()) {
    // The previous step's push has had this step's pull and compute to
    // finish; only then may this one start (servers take a worker's pushes in
    // clock order).
    PS_RETURN_IF_ERROR(FinishPush(*pipeline.pusher));
    pushing_clock_ = clock;
    pipeline.pusher->Start(clock, &step_grads);
  } else {
    pushing_clock_ = clock;
    PS_RETURN_IF_ERROR(client_->Push(clock, step_grads));
    const absl::Duration took = absl::Now() - times.computed;
    RecordPush(clock, took, /*blocked=*/took);
  }
  times.pushed = absl::Now();
  if (options_.slowdown > 1.0) {
    absl::SleepFor((times.computed - times.pulled) * (options_.slowdown - 1.0));
  }
  return times;
}

absl::Status Trainer::PullFailed(absl::Status pulled, Pipeline& pipeline) {
  // A pull that ends with CANCELLED while a push is in flight was cancelled
  // because that push failed (Stop() sets stop_ too): the push's error is the
  // cause to report, not the pull's.
  if (absl::IsCancelled(pulled) && !stop_ && pipeline.pusher.has_value() &&
      pipeline.pusher->busy()) {
    PS_RETURN_IF_ERROR(FinishPush(*pipeline.pusher));
  }
  return pulled;
}

absl::Status Trainer::FinishPush(AsyncPusher& pusher) {
  const absl::Time start = absl::Now();
  AsyncPusher::Result pushed = pusher.Wait();
  if (pushed.clock < 0) return absl::OkStatus();  // None in flight.
  if (!pushed.status.ok()) return pushed.status;
  RecordPush(pushed.clock, pushed.duration, absl::Now() - start);
  return absl::OkStatus();
}

}  // namespace ps

#include "worker/trainer.h"

#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/dataset_reader.h"
#include "common/float_codec.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "worker/batcher.h"
#include "worker/gradient_accumulation.h"
#include "worker/gradient_clipping.h"

namespace ps {

Trainer::Trainer(v1::Assignment assignment,
                 std::function<std::string()> node_id,
                 v1::ClusterService::Stub* coordinator, Backend* backend,
                 WorkerMetrics* metrics, TrainerOptions options)
    : assignment_(std::move(assignment)),
      node_id_(std::move(node_id)),
      coordinator_(coordinator),
      backend_(backend),
      metrics_(metrics),
      options_(options) {}

void Trainer::Stop() {
  absl::MutexLock lock(&stop_mu_);
  stop_ = true;
  if (live_client_ != nullptr) live_client_->Cancel();
  if (live_call_ != nullptr) live_call_->TryCancel();
}

bool Trainer::TrackCall(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&stop_mu_);
  if (ctx != nullptr && stop_) return false;
  live_call_ = ctx;
  return true;
}

absl::Status Trainer::Run() {
  absl::Status status = Train();
  if (!status.ok() && !stop_) {
    PS_LOG_ERROR("job ", assignment_.job_id(), ": worker ", assignment_.index(),
                 " failed: ", status.ToString());
    v1::ProgressReport report;
    report.set_error(status.ToString());
    Report(std::move(report), /*must_arrive=*/true);
  }
  return status;
}

namespace {

// A call to the coordinator may be retried on the usual transient errors, and
// on PERMISSION_DENIED: the node may be registering again under a new id (after
// a coordinator restart). If it truly lost its place, its heartbeat stops the
// trainer, which ends the retries.
bool CoordinatorMayRetry(const absl::Status& status) {
  return IsRetryable(status) || absl::IsPermissionDenied(status);
}

}  // namespace

void Trainer::Report(v1::ProgressReport report, bool must_arrive) {
  if (coordinator_ == nullptr) return;
  report.set_job_id(assignment_.job_id());
  report.set_worker_index(assignment_.index());
  // The coordinator refuses longer errors (it keeps them in the job status).
  constexpr size_t kMaxErrorBytes = 4096;
  if (report.error().size() > kMaxErrorBytes) {
    size_t cut = kMaxErrorBytes;
    // Cut before a character, not inside one: the field must stay UTF-8.
    while (cut > 0 && (report.error()[cut] & 0xC0) == 0x80) --cut;
    report.mutable_error()->resize(cut);
  }
  // Reports are idempotent (latest state wins), so retrying them is safe.
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
  const absl::Time give_up = absl::Now() + options_.report_retry_window;
  while (true) {
    report.set_node_id(node_id_());
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.report_timeout);
    v1::ProgressResponse response;
    // A report of this trainer's failure is sent even once stopped (Run()
    // sends it only when not stopped by Stop()); others end with the trainer.
    const bool tracked = TrackCall(&ctx);
    if (!tracked && report.error().empty()) return;
    grpc::Status status = coordinator_->ReportProgress(&ctx, report, &response);
    if (tracked) TrackCall(nullptr);
    if (status.ok()) {
      if (response.stop()) stop_ = true;
      return;
    }
    if (!must_arrive || stop_ || absl::Now() > give_up ||
        !CoordinatorMayRetry(FromGrpcStatus(status))) {
      PS_LOG_WARNING("progress report failed: ", status.error_message());
      return;
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(backoff.Next()));
  }
}

absl::Status Trainer::UploadModel(int64_t clock, float accuracy) {
  if (coordinator_ == nullptr) return absl::OkStatus();
  v1::UploadModelRequest request;
  request.set_worker_index(assignment_.index());
  v1::TrainedModel* model = request.mutable_model();
  model->set_job_id(assignment_.job_id());
  *model->mutable_model() = assignment_.spec().model();
  model->set_clock(clock);
  model->set_test_accuracy(accuracy);
  model->set_test_samples(test_.num_samples);
  const std::vector<TensorSpec>& tensors = model_->tensors();
  PS_CHECK(params_.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    v1::Tensor* t = model->add_tensors();
    t->set_name(tensors[i].name);
    for (int64_t d : tensors[i].shape) t->add_shape(d);
    EncodeFloats(params_[i], t->mutable_data());
  }
  // Storing the same model twice is harmless, so retrying is safe.
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(2));
  const absl::Time give_up = absl::Now() + options_.upload_window;
  while (true) {
    request.set_node_id(node_id_());
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.upload_timeout);
    v1::UploadModelResponse response;
    if (!TrackCall(&ctx)) return absl::CancelledError("training stopped");
    absl::Status status =
        FromGrpcStatus(coordinator_->UploadModel(&ctx, request, &response));
    TrackCall(nullptr);
    if (status.ok()) {
      PS_LOG_INFO("job ", assignment_.job_id(), ": uploaded the trained model",
                  " (clock ", clock, ", test accuracy ", accuracy, ")");
      return absl::OkStatus();
    }
    if (absl::IsFailedPrecondition(status)) {
      stop_ = true;  // The job ended elsewhere (cancelled, failed).
      return absl::CancelledError(
          absl::StrCat("model upload: ", status.message()));
    }
    if (stop_) return absl::CancelledError("training stopped");
    if (absl::Now() > give_up || !CoordinatorMayRetry(status)) {
      return absl::Status(
          status.code(),
          absl::StrCat("model upload to the coordinator: ", status.message()));
    }
    PS_LOG_WARNING("job ", assignment_.job_id(),
                   ": model upload failed, retrying: ", status.ToString());
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(backoff.Next()));
  }
}

absl::StatusOr<float> Trainer::Evaluate(int64_t clock, bool final) {
  if (auto s = final ? client_->PullFinal(clock, &params_)
                     : client_->Pull(clock, &params_);
      !s.ok()) {
    return s;
  }
  // Test accuracy is measured in float32 whatever the training precision,
  // as `psctl eval` measures an exported model.
  Model* model = eval_model_ != nullptr ? eval_model_.get() : model_.get();
  if (auto s = model->SetParameters(params_); !s.ok()) return s;
  auto correct = model->CountCorrect(test_.features.data(), test_.labels.data(),
                                     test_.num_samples);
  if (!correct.ok()) return correct.status();
  return static_cast<float>(*correct) / test_.num_samples;
}

namespace {

// Checks that every label of `data` (read from `path`) names one of the
// model's classes, so that a wrong num_classes fails the job at once rather
// than at the first batch holding such a label.
absl::Status CheckLabels(const Dataset& data, const std::string& path,
                         int num_classes) {
  for (int64_t i = 0; i < data.num_samples; ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.num_classes: is ", num_classes, " but ", path,
                       " has label ", data.labels[i], " (sample ", i, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Trainer::Train() {
  const v1::JobSpec& spec = assignment_.spec();
  const int worker = assignment_.index();
  const bool evaluator = worker == 0;
  if (stop_) return absl::CancelledError("training stopped");

  // IDX, CSV or libsvm (common/dataset_reader.h).
  auto train =
      ReadDataset(spec.dataset(), /*train=*/true, spec.model().input_dim());
  if (!train.ok()) return train.status();
  if (train->dim != spec.model().input_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.input_dim: is ", spec.model().input_dim(), " but ",
                     FeaturesPath(spec.dataset(), true), " has ", train->dim,
                     " values per sample"));
  }
  if (auto s = CheckLabels(*train, LabelsPath(spec.dataset(), true),
                           spec.model().num_classes());
      !s.ok()) {
    return s;
  }
  if (evaluator) {
    auto test =
        ReadDataset(spec.dataset(), /*train=*/false, spec.model().input_dim());
    if (!test.ok()) return test.status();
    if (test->dim != train->dim) {
      return absl::InvalidArgumentError(
          "dataset: test and train samples differ in size");
    }
    if (auto s = CheckLabels(*test, LabelsPath(spec.dataset(), false),
                             spec.model().num_classes());
        !s.ok()) {
      return s;
    }
    test_ = *std::move(test);
  }
  const ModelOptions model_options =
      ModelOptionsFromSpec(spec.mixed_precision());
  auto model = Model::Create(spec.model(), backend_, model_options);
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
  eval_model_.reset();
  if (model_options.precision != Precision::kFp32) {
    auto eval_model = Model::Create(spec.model(), backend_);
    if (!eval_model.ok()) return eval_model.status();
    eval_model_ = *std::move(eval_model);
  }
  auto client = ParameterClient::Create(assignment_, model_->tensors(),
                                        options_.parameter_client, &stop_);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  {
    absl::MutexLock lock(&stop_mu_);
    live_client_ = client_.get();
    // Stopped before the client existed: its calls end at once.
    if (stop_) live_client_->Cancel();
  }
  auto partition =
      DataPartition::Create(train->num_samples, assignment_.num_workers());
  if (!partition.ok()) return partition.status();

  // Samples per push: batch_size times accumulation_steps micro-batches.
  const int accumulation = AccumulationSteps(spec);
  const int batch = spec.batch_size() * accumulation;
  const int64_t steps = partition->StepsPerEpoch(batch);
  if (steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size: ", batch,
                     accumulation > 1 ? " (with accumulation_steps)" : "",
                     " is larger than a worker's part of the data (",
                     partition->per_worker(), " samples)"));
  }
  const int64_t total_clocks = steps * spec.epochs();
  if (!options_.ack_log.empty()) {
    ack_log_.open(options_.ack_log, std::ios::app);
    if (!ack_log_) {
      return absl::UnavailableError(
          absl::StrCat("cannot open ack log ", options_.ack_log));
    }
  }
  // A worker taking over a lost worker's place continues at its clock, with the
  // same data order (a pure function of seed, epoch and index).
  auto resume = client_->ResumeClock();
  if (!resume.ok()) return resume.status();
  if (*resume > 0) {
    PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", worker,
                " resumes at clock ", *resume, " of ", total_clocks);
  }
  PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", worker, " of ",
              assignment_.num_workers(), ", ", partition->per_worker(),
              " samples, ", steps, " steps per epoch, backend ",
              backend_->name());

  std::vector<float> features(static_cast<size_t>(batch) * train->dim);
  std::vector<int32_t> labels(batch);
  // Two gradient buffers: one being pushed while the next step fills the
  // other. Declared before the pusher, which must end first.
  std::vector<std::vector<float>> grads[2];
  // Likewise two parameter buffers: the next step's pull fills one while this
  // step computes from the other.
  std::vector<std::vector<float>> pulled[2];
  std::vector<std::vector<float>> micro_grads;  // Accumulation's scratch.
  std::optional<AsyncPusher> pusher;
  std::optional<AsyncPuller> puller;
  if (options_.overlap_push) {
    // A failed push ends training, and this worker's clock can no longer
    // advance: a pull made ahead would wait on the servers for it until its
    // deadline and retries. Cancelling the client ends it at once (with
    // CANCELLED: pull_failed below reports the push's error instead).
    pusher.emplace(client_.get(),
                   [this](const absl::Status&) { client_->Cancel(); });
  }
  if (options_.prefetch_pull) puller.emplace(client_.get());
  // A pull that ends with CANCELLED while a push is in flight was cancelled
  // because that push failed (Stop() sets stop_ too): the push's error is the
  // cause to report, not the pull's.
  auto pull_failed = [&](absl::Status pulled) {
    if (absl::IsCancelled(pulled) && !stop_ && pusher.has_value() &&
        pusher->busy()) {
      if (absl::Status pushed = FinishPush(*pusher); !pushed.ok()) {
        return pushed;
      }
    }
    return pulled;
  };
  // Training ends with a call still in flight only on an error, and then a
  // pull made ahead may be parked on a server for a push that will not come:
  // end it rather than wait out its deadline and retries. (Runs before the
  // pusher and puller wait for their calls.)
  absl::Cleanup end_calls_in_flight = [&] {
    if ((puller.has_value() && puller->busy()) ||
        (pusher.has_value() && pusher->busy())) {
      client_->Cancel();
    }
  };
  double interval_loss = 0;
  int64_t interval_steps = 0;
  absl::Time interval_start = absl::Now();
  int64_t clock = *resume;
  int64_t pulls_made = 0, pulls_saved = 0, overflowed_steps = 0;
  int64_t pushed_bytes = 0, pulled_bytes = 0;
  // Adds to `metric` what a running total gained since `*last`. The total is
  // read once: the pipeline's threads may be adding to it.
  auto count = [](prometheus::Counter& metric, int64_t total, int64_t* last) {
    metric.Increment(total - *last);
    *last = total;
  };
  for (int epoch = clock / steps; epoch < spec.epochs(); ++epoch) {
    const std::vector<int64_t> order =
        partition->EpochOrder(spec.seed(), epoch, worker);
    for (int64_t step = clock % steps; step < steps; ++step, ++clock) {
      if (stop_) return absl::CancelledError("training stopped");
      absl::Time t0 = absl::Now();
      std::vector<std::vector<float>>& step_params = pulled[clock % 2];
      if (puller.has_value() && puller->busy()) {
        // Made while the previous step computed.
        if (auto s = puller->Wait().status; !s.ok()) return pull_failed(s);
      } else if (auto s = client_->Pull(clock, &step_params); !s.ok()) {
        return pull_failed(s);
      }
      absl::Time t1 = absl::Now();
      // Not across an epoch's end, where worker 0 pulls to evaluate.
      if (puller.has_value() && step + 1 < steps) {
        puller->Start(clock + 1, &pulled[(clock + 1) % 2]);
      }
      GatherBatch(*train,
                  std::span<const int64_t>(order).subspan(step * batch, batch),
                  features.data(), labels.data());
      if (auto s = model_->SetParameters(step_params); !s.ok()) return s;
      std::vector<std::vector<float>>& step_grads = grads[clock % 2];
      // Accumulation and clipping hooks (docs/training.md).
      auto loss = ComputeAccumulatedGradients(
          *model_, features.data(), labels.data(), train->dim,
          spec.batch_size(), accumulation, &step_grads, &micro_grads);
      if (!loss.ok()) return loss.status();
      ClipGradients(spec.gradient_clipping(), &step_grads);
      absl::Time t2 = absl::Now();
      if (pusher.has_value()) {
        // The previous step's push has had this step's pull and compute to
        // finish; only then may this one start (servers take a worker's
        // pushes in clock order).
        if (auto s = FinishPush(*pusher); !s.ok()) return s;
        pusher->Start(clock, &step_grads);
      } else {
        if (auto s = client_->Push(clock, step_grads); !s.ok()) return s;
        const absl::Duration took = absl::Now() - t2;
        RecordPush(clock, took, /*blocked=*/took);
      }
      absl::Time t3 = absl::Now();
      if (options_.slowdown > 1.0) {
        absl::SleepFor((t2 - t1) * (options_.slowdown - 1.0));
      }
      const StepTiming& timing = model_->step_timing();
      metrics_->pull_seconds.Observe(absl::ToDoubleSeconds(t1 - t0));
      metrics_->compute_seconds.Observe(absl::ToDoubleSeconds(timing.compute));
      metrics_->copy_to_device_seconds.Observe(
          absl::ToDoubleSeconds(timing.to_device));
      metrics_->copy_to_host_seconds.Observe(
          absl::ToDoubleSeconds(timing.to_host));
      metrics_->steps.Increment();
      metrics_->loss_scale.Set(model_->loss_scale());
      count(metrics_->overflowed_steps, model_->overflowed_steps(),
            &overflowed_steps);
      count(metrics_->pulls_made, client_->pulls_made(), &pulls_made);
      count(metrics_->pulls_saved, client_->pulls_saved(), &pulls_saved);
      count(metrics_->push_bytes, client_->pushed_bytes(), &pushed_bytes);
      count(metrics_->pull_bytes, client_->pulled_bytes(), &pulled_bytes);
      metrics_->samples.Increment(batch);
      interval_loss += *loss;
      ++interval_steps;

      const absl::Duration elapsed = t3 - interval_start;
      const bool epoch_end = step + 1 == steps;
      if (elapsed >= options_.report_interval || epoch_end) {
        const double rate =
            interval_steps * batch / absl::ToDoubleSeconds(elapsed);
        const float mean_loss = interval_loss / interval_steps;
        metrics_->samples_per_second.Set(rate);
        metrics_->loss.Set(mean_loss);
        v1::ProgressReport report;
        report.set_epoch(epoch + (epoch_end ? 1 : 0));
        report.set_clock(clock + 1);
        report.set_total_clocks(total_clocks);
        report.set_loss(mean_loss);
        report.set_samples_per_second(rate);
        report.set_test_accuracy(-1);
        if (epoch_end) {
          // The epoch's last push must be in before the epoch is reported
          // (and worker 0 evaluates the model after it).
          if (pusher.has_value()) {
            if (auto s = FinishPush(*pusher); !s.ok()) return s;
          }
          if (auto s = EndEpoch(std::move(report), epoch + 1 == spec.epochs());
              !s.ok()) {
            return s;
          }
        } else {
          Report(std::move(report), /*must_arrive=*/false);
        }
        interval_loss = 0;
        interval_steps = 0;
        interval_start = absl::Now();
      }
    }
  }
  if (*resume >= total_clocks) {
    // The previous holder of this place pushed everything before it was lost;
    // only the end of the last epoch remains.
    v1::ProgressReport report;
    report.set_epoch(spec.epochs());
    report.set_clock(total_clocks);
    report.set_total_clocks(total_clocks);
    report.set_test_accuracy(-1);
    return EndEpoch(std::move(report), /*last=*/true);
  }
  return absl::OkStatus();
}

void Trainer::RecordPush(int64_t clock, absl::Duration took,
                         absl::Duration blocked) {
  if (ack_log_.is_open()) {
    ack_log_ << assignment_.job_id() << " " << assignment_.index() << " "
             << clock << std::endl;  // Flushed: the line must survive kill -9.
  }
  metrics_->push_seconds.Observe(absl::ToDoubleSeconds(took));
  metrics_->push_blocked_seconds.Observe(absl::ToDoubleSeconds(blocked));
}

absl::Status Trainer::FinishPush(AsyncPusher& pusher) {
  const absl::Time start = absl::Now();
  AsyncPusher::Result pushed = pusher.Wait();
  if (pushed.clock < 0) return absl::OkStatus();  // None in flight.
  if (!pushed.status.ok()) return pushed.status;
  RecordPush(pushed.clock, pushed.duration, absl::Now() - start);
  return absl::OkStatus();
}

absl::Status Trainer::EndEpoch(v1::ProgressReport report, bool last) {
  if (assignment_.index() == 0) {
    // Worker 0 evaluates the model as of its clock on the test set; after
    // the last epoch, the final model: every worker's every update (under
    // SSP and ASP the others may still be training).
    auto accuracy = Evaluate(report.clock(), /*final=*/last);
    if (!accuracy.ok()) return accuracy.status();
    last_accuracy_ = *accuracy;
    metrics_->test_accuracy.Set(*accuracy);
    report.set_test_accuracy(*accuracy);
    PS_LOG_INFO("job ", assignment_.job_id(), ": epoch ", report.epoch(),
                " test accuracy ", *accuracy);
    if (last) {
      // Before the final report: the job must not SUCCEED without its model.
      if (auto s = UploadModel(report.clock(), last_accuracy_); !s.ok()) {
        return s;
      }
    }
  }
  report.set_finished(last);
  Report(std::move(report), /*must_arrive=*/true);
  return absl::OkStatus();
}

}  // namespace ps

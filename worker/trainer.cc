#include "worker/trainer.h"

#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/dataset_reader.h"
#include "common/elastic_spec.h"
#include "common/float_codec.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "worker/batcher.h"
#include "worker/gradient_accumulation.h"
#include "worker/gradient_clipping.h"
#include "worker/local_sgd.h"

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
      options_(std::move(options)),
      latest_(assignment_) {}

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

int SamplesPerClockOf(const v1::JobSpec& spec) {
  return spec.batch_size() * AccumulationSteps(spec) * LocalSteps(spec);
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
  // A report of this trainer's failure is sent even once stopped (Run() sends
  // it only when not stopped by Stop()); others end with the trainer.
  bool skipped = false;
  Retrier retry({.window = options_.report_retry_window});
  absl::Status status = retry.Run(
      [&] {
        report.set_node_id(node_id_());
        grpc::ClientContext ctx;
        SetDeadline(&ctx, options_.report_timeout);
        v1::ProgressResponse response;
        const bool tracked = TrackCall(&ctx);
        if (!tracked && report.error().empty()) {
          skipped = true;
          return absl::CancelledError("training stopped");
        }
        grpc::Status sent =
            coordinator_->ReportProgress(&ctx, report, &response);
        if (tracked) TrackCall(nullptr);
        if (sent.ok() && response.stop()) stop_ = true;
        return FromGrpcStatus(sent);
      },
      [&](const absl::Status& s) {
        return !skipped && must_arrive && !stop_ && CoordinatorMayRetry(s);
      });
  if (!status.ok() && !skipped) {
    PS_LOG_WARNING("progress report failed: ", status.message());
  }
}

absl::Status Trainer::UploadModel(int64_t clock, const Evaluation& evaluation) {
  const float accuracy = evaluation.accuracy;
  if (coordinator_ == nullptr) return absl::OkStatus();
  v1::UploadModelRequest request;
  request.set_worker_index(assignment_.index());
  v1::TrainedModel* model = request.mutable_model();
  model->set_job_id(assignment_.job_id());
  *model->mutable_model() = assignment_.spec().model();
  model->set_clock(clock);
  model->set_test_accuracy(accuracy);
  model->set_test_samples(ctr_model_ != nullptr ? ctr_test_samples_
                                                : test_.num_samples);
  if (ctr_model_ != nullptr) {
    model->set_test_auc(evaluation.auc);
    model->set_test_log_loss(evaluation.log_loss);
  }
  const std::vector<TensorSpec>& tensors =
      ctr_model_ != nullptr ? ctr_model_->tensors() : model_->tensors();
  PS_CHECK(params_.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    v1::Tensor* t = model->add_tensors();
    t->set_name(tensors[i].name);
    for (int64_t d : tensors[i].shape) t->add_shape(d);
    EncodeFloats(params_[i], t->mutable_data());
  }
  // Storing the same model twice is harmless, so retrying is safe.
  std::optional<absl::Status> ended;  // Set when retrying must end.
  Retrier retry({.window = options_.upload_window});
  absl::Status status = retry.Run(
      [&] {
        request.set_node_id(node_id_());
        grpc::ClientContext ctx;
        SetDeadline(&ctx, options_.upload_timeout);
        v1::UploadModelResponse response;
        if (!TrackCall(&ctx)) {
          ended = absl::CancelledError("training stopped");
          return *ended;
        }
        absl::Status uploaded =
            FromGrpcStatus(coordinator_->UploadModel(&ctx, request, &response));
        TrackCall(nullptr);
        if (absl::IsFailedPrecondition(uploaded)) {
          stop_ = true;  // The job ended elsewhere (cancelled, failed).
          ended = absl::CancelledError(
              absl::StrCat("model upload: ", uploaded.message()));
        } else if (!uploaded.ok() && stop_) {
          ended = absl::CancelledError("training stopped");
        }
        return uploaded;
      },
      [&](const absl::Status& s) {
        if (ended.has_value() || !CoordinatorMayRetry(s)) return false;
        PS_LOG_WARNING("job ", assignment_.job_id(),
                       ": model upload failed, retrying: ", s.ToString());
        return true;
      });
  if (ended.has_value()) return *ended;
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("model upload to the coordinator: ", status.message()));
  }
  PS_LOG_INFO("job ", assignment_.job_id(), ": uploaded the trained model",
              " (clock ", clock, ", test accuracy ", accuracy, ")");
  return absl::OkStatus();
}

absl::StatusOr<Trainer::Evaluation> Trainer::EvaluateModel(int64_t clock,
                                                           bool final) {
  if (ctr_model_ != nullptr) return EvaluateCtr(clock, final);
  PS_ASSIGN_OR_RETURN(const float accuracy, Evaluate(clock, final));
  return Evaluation{.accuracy = accuracy};
}

absl::StatusOr<float> Trainer::Evaluate(int64_t clock, bool final) {
  PS_RETURN_IF_ERROR(final ? client_->PullFinal(clock, &params_)
                           : client_->Pull(clock, &params_));
  // Test accuracy is measured in float32 whatever the training precision,
  // as `psctl eval` measures an exported model.
  Model* model = eval_model_ != nullptr ? eval_model_.get() : model_.get();
  PS_RETURN_IF_ERROR(model->SetParameters(params_));
  PS_ASSIGN_OR_RETURN(auto correct, model->CountCorrect(test_.features.data(),
                                                        test_.labels.data(),
                                                        test_.num_samples));
  return static_cast<float>(correct) / test_.num_samples;
}

namespace {

// Samples one clock consumes: batch_size per micro-batch, accumulation_steps
// micro-batches per step, local_sgd.local_steps steps per clock.
int SamplesPerClock(const v1::JobSpec& spec) { return SamplesPerClockOf(spec); }

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

// The life of a training job on this worker: load the data, build the model
// and the parameter client, plan the clocks, then run one step per clock
// (pull, compute, push), record its metrics and report progress; each epoch
// ends with a report (and on worker 0 an evaluation).
absl::Status Trainer::Train() {
  if (stop_) return absl::CancelledError("training stopped");
  if (assignment_.spec().model().kind() == v1::ModelSpec::CTR) {
    return TrainCtr();
  }
  PS_ASSIGN_OR_RETURN(Dataset train, LoadData());
  PS_RETURN_IF_ERROR(BuildModelAndClient());
  if (IsElastic(assignment_.spec())) return TrainElastic(train);
  while (true) {
    absl::Status status = TrainUnderMap(train);
    // A server move: the servers refuse the old map once the new one is in
    // effect; go on under the new one from the clock they recorded.
    if (stop_ || !IsMapChange(status)) return status;
    PS_RETURN_IF_ERROR(FollowMapChange());
  }
}

absl::Status Trainer::TrainUnderMap(const Dataset& train) {
  PS_ASSIGN_OR_RETURN(Plan plan, MakePlan(train));

  const v1::JobSpec& spec = assignment_.spec();
  const int batch = SamplesPerClock(spec);
  Pipeline pipeline;
  StartPipeline(batch, train.dim, pipeline);
  absl::Cleanup end_calls_in_flight = [&] { EndCallsInFlight(pipeline); };

  return RunClocks(plan, pipeline,
                   [&](std::span<const int64_t> batch_order, int64_t clock,
                       bool prefetch_next) {
                     return RunStep(train, batch_order, clock, prefetch_next,
                                    pipeline);
                   });
}

absl::Status Trainer::RunClocks(const Plan& plan, Pipeline& pipeline,
                                StepFunction step_at) {
  const v1::JobSpec& spec = assignment_.spec();
  const int batch = SamplesPerClock(spec);
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
      interval.loss += times.loss;
      ++interval.steps;

      const bool epoch_end = step + 1 == plan.steps;
      if (times.pushed - interval.start >= options_.report_interval ||
          epoch_end) {
        PS_RETURN_IF_ERROR(ReportInterval(epoch, clock, epoch_end, plan,
                                          times.pushed, &interval, pipeline));
      }
    }
  }
  if (plan.resume_clock >= plan.total_clocks) {
    // The previous holder of this place pushed everything before it was lost;
    // only the end of the last epoch remains.
    return EndAfterLastClock(plan.total_clocks);
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

absl::StatusOr<Dataset> Trainer::LoadData() {
  const v1::JobSpec& spec = assignment_.spec();
  // IDX, CSV or libsvm (common/dataset_reader.h).
  PS_ASSIGN_OR_RETURN(Dataset train, ReadDataset(spec.dataset(), /*train=*/true,
                                                 spec.model().input_dim()));
  if (train.dim != spec.model().input_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.input_dim: is ", spec.model().input_dim(), " but ",
                     FeaturesPath(spec.dataset(), true), " has ", train.dim,
                     " values per sample"));
  }
  PS_RETURN_IF_ERROR(CheckLabels(train, LabelsPath(spec.dataset(), true),
                                 spec.model().num_classes()));
  if (assignment_.index() == 0) {  // The evaluator.
    PS_ASSIGN_OR_RETURN(
        Dataset test,
        ReadDataset(spec.dataset(), /*train=*/false, spec.model().input_dim()));
    if (test.dim != train.dim) {
      return absl::InvalidArgumentError(
          "dataset: test and train samples differ in size");
    }
    PS_RETURN_IF_ERROR(CheckLabels(test, LabelsPath(spec.dataset(), false),
                                   spec.model().num_classes()));
    test_ = std::move(test);
  }
  return train;
}

absl::Status Trainer::BuildModelAndClient() {
  const v1::JobSpec& spec = assignment_.spec();
  const ModelOptions model_options =
      ModelOptionsFromSpec(spec.mixed_precision());
  PS_ASSIGN_OR_RETURN(model_,
                      Model::Create(spec.model(), backend_, model_options));
  eval_model_.reset();
  if (model_options.precision != Precision::kFp32) {
    PS_ASSIGN_OR_RETURN(eval_model_, Model::Create(spec.model(), backend_));
  }
  if (LocalSgdEnabled(spec)) local_sgd_ = std::make_unique<LocalSgd>(spec);
  PS_ASSIGN_OR_RETURN(
      auto client, ParameterClient::Create(assignment_, model_->tensors(),
                                           options_.parameter_client, &stop_));
  InstallClient(std::move(client));
  return absl::OkStatus();
}

void Trainer::InstallClient(std::unique_ptr<ParameterClient> client) {
  client_ = std::move(client);
  absl::MutexLock lock(&stop_mu_);
  live_client_ = client_.get();
  // Stopped before the client existed: its calls end at once.
  if (stop_) live_client_->Cancel();
}

absl::StatusOr<Trainer::Plan> Trainer::MakePlan(const Dataset& train) {
  const v1::JobSpec& spec = assignment_.spec();
  const int labels_per_worker = spec.dataset().labels_per_worker();
  return MakePlan(
      labels_per_worker > 0
          ? DataPartition::CreateByLabels(
                train.labels, assignment_.num_workers(),
                spec.model().num_classes(), labels_per_worker, spec.seed())
          : DataPartition::Create(train.num_samples, assignment_.num_workers()),
      assignment_.index());
}

absl::StatusOr<Trainer::Plan> Trainer::MakePlan(
    absl::StatusOr<DataPartition> partition_or, int worker_in_partition) {
  const v1::JobSpec& spec = assignment_.spec();
  PS_ASSIGN_OR_RETURN(DataPartition partition, std::move(partition_or));
  const int batch = SamplesPerClock(spec);
  const int64_t steps = partition.StepsPerEpoch(batch);
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size: ", batch,
        batch > spec.batch_size()
            ? " (batch_size * accumulation_steps * local_sgd.local_steps)"
            : "",
        " is larger than a worker's part of the data (", partition.per_worker(),
        " samples)"));
  }
  const int64_t total_clocks = steps * spec.epochs();
  if (!options_.ack_log.empty() && !ack_log_.is_open()) {
    ack_log_.open(options_.ack_log, std::ios::app);
    if (!ack_log_) {
      return absl::UnavailableError(
          absl::StrCat("cannot open ack log ", options_.ack_log));
    }
  }
  // A worker taking over a lost worker's place continues at its clock, with the
  // same data order (a pure function of seed, epoch and index).
  PS_ASSIGN_OR_RETURN(const int64_t resume, client_->ResumeClock());
  const int worker = assignment_.index();
  if (resume > 0) {
    PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", worker,
                " resumes at clock ", resume, " of ", total_clocks);
  }
  PS_LOG_INFO("job ", assignment_.job_id(), ": worker ", worker, " of ",
              assignment_.num_workers(), ", ", partition.per_worker(),
              " samples, ", steps, " steps per epoch, backend ",
              backend_->name());
  return Plan{.partition = partition,
              .steps = steps,
              .total_clocks = total_clocks,
              .resume_clock = resume,
              .worker = worker_in_partition};
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
    pipeline.pusher->Start(clock, &step_grads);
  } else {
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

absl::Status Trainer::ReportInterval(int epoch, int64_t clock, bool epoch_end,
                                     const Plan& plan, absl::Time now,
                                     Interval* interval, Pipeline& pipeline) {
  const absl::Duration elapsed = now - interval->start;
  const double rate = static_cast<double>(interval->steps) *
                      SamplesPerClock(assignment_.spec()) /
                      absl::ToDoubleSeconds(elapsed);
  const float mean_loss = interval->loss / interval->steps;
  metrics_->samples_per_second.Set(rate);
  metrics_->loss.Set(mean_loss);
  v1::ProgressReport report;
  report.set_epoch(epoch + (epoch_end ? 1 : 0));
  report.set_clock(clock + 1);
  report.set_total_clocks(plan.total_clocks);
  report.set_loss(mean_loss);
  report.set_samples_per_second(rate);
  report.set_test_accuracy(-1);
  report.set_test_auc(-1);
  report.set_test_log_loss(-1);
  if (epoch_end) {
    // The epoch's last push must be in before the epoch is reported (and
    // worker 0 evaluates the model after it).
    if (pipeline.pusher.has_value()) {
      PS_RETURN_IF_ERROR(FinishPush(*pipeline.pusher));
    }
    PS_RETURN_IF_ERROR(
        EndEpoch(std::move(report), epoch + 1 == assignment_.spec().epochs()));
  } else {
    Report(std::move(report), /*must_arrive=*/false);
  }
  *interval = Interval{.start = absl::Now()};
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
    PS_ASSIGN_OR_RETURN(const Evaluation evaluation,
                        EvaluateModel(report.clock(), /*final=*/last));
    metrics_->test_accuracy.Set(evaluation.accuracy);
    report.set_test_accuracy(evaluation.accuracy);
    report.set_test_auc(evaluation.auc);
    report.set_test_log_loss(evaluation.log_loss);
    PS_LOG_INFO("job ", assignment_.job_id(), ": epoch ", report.epoch(),
                " test accuracy ", evaluation.accuracy,
                ctr_model_ != nullptr
                    ? absl::StrCat(", auc ", evaluation.auc, ", log loss ",
                                   evaluation.log_loss)
                    : "");
    if (last) {
      // Before the final report: the job must not SUCCEED without its model.
      PS_RETURN_IF_ERROR(UploadModel(report.clock(), evaluation));
    }
  }
  report.set_finished(last);
  Report(std::move(report), /*must_arrive=*/true);
  return absl::OkStatus();
}

}  // namespace ps

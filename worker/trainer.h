// One worker's training of one job: load its part of the data, then per
// iteration pull parameters, compute gradients, push them; worker 0 evaluates
// test accuracy after every epoch. Progress goes to the coordinator.
#ifndef PS_WORKER_TRAINER_H_
#define PS_WORKER_TRAINER_H_

#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/criteo_reader.h"
#include "common/idx_reader.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "worker/batcher.h"
#include "worker/elastic_plan.h"
#include "worker/gradient_clipping.h"
#include "worker/local_sgd.h"
#include "worker/model/backend.h"
#include "worker/model/ctr_model.h"
#include "worker/model/model.h"
#include "worker/parameter_client.h"
#include "worker/step_pipeline.h"
#include "worker/worker_metrics.h"

namespace ps {

struct TrainerOptions {
  // Time between progress reports to the coordinator.
  absl::Duration report_interval = absl::Seconds(1);
  // Deadline of each ReportProgress call.
  absl::Duration report_timeout = absl::Seconds(2);
  // How long end-of-epoch reports are retried (they must outlast a coordinator
  // restart); other reports are sent once.
  absl::Duration report_retry_window = absl::Minutes(5);
  ParameterClientOptions parameter_client;
  // If set, a line "<job> <worker> <clock>" is appended to this file after
  // every acknowledged push, so a fault test can check that no acknowledged
  // update is lost. Empty: no log.
  std::string ack_log;
  // Elastic jobs: if set, a line "<job> <place> <clock> <epoch> <sample>..."
  // is appended to this file before each step, naming the samples (indices
  // into the training set) the step trains, so that a test can check that
  // every sample is trained once per epoch (tests/system). A place's later
  // line for the same clock (after a re-plan) replaces an earlier one.
  // Empty: no log.
  std::string sample_log;
  // Elastic jobs: a graceful leave (tests; a preemption notice): once the
  // push of this clock is acknowledged, Run() returns OK; the coordinator
  // then drops the place as it drops a lost worker. -1: never.
  int64_t leave_after_clock = -1;
  // Straggler simulation for experiments: after each step, sleep (slowdown - 1)
  // times the step's computation (forward and backward), so the worker
  // computes `slowdown` times slower. 1 means no slowdown.
  double slowdown = 1.0;
  // Push a step's gradients while the next step pulls and computes (one
  // push in flight at most; the servers let a worker pull one clock ahead of
  // its recorded pushes). False: pull, compute, push in turn.
  bool overlap_push = true;
  // Pull the next step's parameters while this step computes (within an
  // epoch; the servers let a worker pull two clocks ahead of its recorded
  // pushes). False: each step pulls, then computes.
  bool prefetch_pull = true;
  // Deadline of each UploadModel call (worker 0, at the end of the job).
  absl::Duration upload_timeout = absl::Seconds(10);
  // How long worker 0 retries a failing UploadModel before the job fails.
  absl::Duration upload_window = absl::Seconds(60);
};

// Samples one clock of one worker consumes: batch_size per micro-batch,
// accumulation_steps micro-batches per step, local_sgd.local_steps steps per
// clock.
int SamplesPerClockOf(const v1::JobSpec& spec);

// Runs on the caller's thread; Stop() may be called from any thread.
class Trainer {
 public:
  // `coordinator` (may be null: no reports), `backend` and `metrics` must
  // outlive the trainer.
  // `node_id` returns the node's current id (it changes when the node registers
  // again, e.g. after a coordinator restart); may be null when `coordinator`
  // is.
  Trainer(v1::Assignment assignment, std::function<std::string()> node_id,
          v1::ClusterService::Stub* coordinator, Backend* backend,
          WorkerMetrics* metrics, TrainerOptions options);

  // Trains to the end, or until stopped. A failure (missing data, unreachable
  // servers) is reported to the coordinator, which fails the job, and returned.
  absl::Status Run();
  // Asks Run() to return soon (the job was cancelled or ended elsewhere):
  // cancels the calls in flight to the servers and the coordinator, so Run()
  // returns within moments even while a server does not answer. Does not
  // wait; any thread.
  void Stop();
  // The coordinator's latest assignment for this trainer's place (the
  // worker node passes on each heartbeat's): an elastic job's membership
  // changes reach the training loop through it. Any thread.
  void OfferAssignment(const v1::Assignment& assignment);
  // Elastic jobs: the version of the membership change in progress that
  // this trainer, joining the job, is ready to train (its data loaded);
  // 0 otherwise. The worker node reports it in its heartbeats
  // (HeldAssignment.membership_version): servers are told of a change only
  // once its joining workers are ready. Any thread.
  int64_t ReadyForMembership() const { return ready_for_; }

 private:
  // The parts of one run of the training loop (Train), in their order.
  // What the loop works through: this worker's part of the data, the clocks.
  struct Plan {
    DataPartition partition;
    int64_t steps = 0;         // Steps (clocks) per epoch.
    int64_t total_clocks = 0;  // steps * epochs.
    int64_t resume_clock = 0;  // The first clock to train (0, or a lost
                               // worker's place taken over).
    int worker = 0;            // This worker's index in `partition`.
  };
  // The step loop's buffers and its calls in flight. The pusher and puller
  // are declared last: they end (waiting for their calls) before the
  // buffers they write go away.
  struct Pipeline {
    std::vector<float> features;
    std::vector<int32_t> labels;
    // Two gradient buffers: one being pushed while the next step fills the
    // other; likewise two parameter buffers: the next step's pull fills one
    // while this step computes from the other. Indexed by clock % 2.
    std::vector<std::vector<float>> grads[2];
    std::vector<std::vector<float>> pulled[2];
    std::vector<std::vector<float>> micro_grads;  // Accumulation's scratch.
    std::optional<AsyncPusher> pusher;            // With options_.overlap_push.
    std::optional<AsyncPuller> puller;  // With options_.prefetch_pull.
  };
  // When one step's phases ended, and its loss.
  struct StepTimes {
    absl::Time start, pulled, computed, pushed;
    float loss = 0;
  };
  // Loss and steps since the last progress report.
  struct Interval {
    double loss = 0;
    int64_t steps = 0;
    absl::Time start;
  };
  // The parameter client's running totals as last added to the metrics.
  struct CounterMarks {
    int64_t overflowed_steps = 0, pulls_made = 0, pulls_saved = 0;
    int64_t pushed_bytes = 0, pulled_bytes = 0;
  };

  // What worker 0 measured on the test set.
  struct Evaluation {
    float accuracy = 0;
    float auc = -1;       // CTR models only.
    float log_loss = -1;  // CTR models only.
  };
  // A CTR job's step loop (worker/trainer_ctr.cc): its sample stream, two
  // step slots and the pull and push in flight.
  struct CtrPipeline;

  // One step at `clock` on the samples `batch_order` names (`prefetch_next`:
  // the next step is in the same epoch).
  using StepFunction = absl::FunctionRef<absl::StatusOr<StepTimes>(
      std::span<const int64_t> batch_order, int64_t clock, bool prefetch_next)>;
  // The clocks of `plan` from its resume clock: each epoch's data order,
  // one `step_at` per clock, its metrics, the progress reports and the ends
  // of epochs (ReportInterval); a place whose every clock was pushed only
  // ends the last epoch. Errors: a step's, an end of epoch's.
  absl::Status RunClocks(const Plan& plan, Pipeline& pipeline,
                         StepFunction step_at);
  // Loads data, builds the model and client, plans, then runs the steps.
  absl::Status Train();
  // Train for a fixed-size dense job under one shard map: plans from the
  // servers' resume clock and runs the clocks.
  absl::Status TrainUnderMap(const Dataset& train);
  // Server moves (worker/trainer_scale.cc): waits (while not stopped, up to
  // two minutes) for an assignment whose shard map is newer than the
  // client's, and installs a client for it. DEADLINE_EXCEEDED if none.
  // When `why` (the status training ended with) is a server's refusal of
  // the client's map because the server has not taken it yet (a rebuild
  // elsewhere), a client for the same map is installed after a short wait.
  absl::Status FollowMapChange(const absl::Status& why);
  // When training under a map ends on a change of map with a push started
  // and not acknowledged (a lost server never answered it), keeps that
  // push's clock and gradients (worker/trainer_scale.cc).
  void KeepUnacknowledgedPush(const Pipeline& pipeline);
  // Under the new map, at `resume` (the clock the servers hold for this
  // worker): the kept push of that clock is sent again unchanged (servers
  // that applied it answer it as a duplicate), so that no server applies a
  // gradient computed again from values others updated; returns the clock
  // to go on from. The push's errors.
  absl::StatusOr<int64_t> ResendUnacknowledgedPush(int64_t resume);
  // A lost server's place rebuilt elsewhere (worker/trainer_scale.cc): when
  // `offered`'s map is newer than the client's and differs only in servers'
  // addresses, the client's calls (retrying the lost server) are cancelled,
  // so that training follows the new map. Called with latest_mu_ held.
  void CancelOnReaddress(const v1::Assignment& offered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(latest_mu_);
  // Whether an assignment with a newer shard map than the client's was
  // offered: the end of a call then comes from the map change. Any thread.
  bool NewerMapOffered();
  // Train for an elastic job (worker/trainer_elastic.cc): plans under the
  // latest membership (ElasticPlan), runs the clocks from the servers'
  // resume clock, and re-plans whenever the servers refuse a request
  // planned under an older membership.
  absl::Status TrainElastic(const Dataset& train);
  // One pass of TrainElastic under one membership. Errors: a step's, an
  // end of epoch's (a membership change among them).
  absl::Status RunElasticPass(const ElasticPlan& elastic, const Plan& plan,
                              const Dataset& train);
  // Waits (while not stopped, up to two minutes) for an assignment whose
  // committed membership is newer than `newer_than` and names this place.
  absl::StatusOr<v1::Assignment> AwaitMembership(int64_t newer_than);
  // Train for a CTR model (worker/trainer_ctr.cc): the same clocks, reports
  // and end of epochs, with each step's sparse rows pulled and pushed
  // beside the dense tensors.
  absl::Status TrainCtr();
  // One pass of TrainCtr under one shard map: plans from the servers'
  // resume clock and runs the clocks. Errors: a step's (a map change among
  // them).
  absl::Status TrainCtrUnderMap(int64_t per_worker);
  // Reads this worker's shard of the Criteo-format training set (and on
  // worker 0 the test set) through once, checking every sample and the
  // shapes against the model, holding none; returns the samples each worker
  // trains per epoch. Errors: unreadable or malformed files, a wrong shape.
  absl::StatusOr<int64_t> ScanCtrData();
  // One CTR step at `clock` (docs/sparse.md, "A step's pipeline"): its
  // batch and pull (made ahead by the previous step, or now), then the next
  // step's batch and pull when `prefetch_next`, compute, and the push
  // (started; waited for at the next step, or now when not
  // `prefetch_next`). Errors: the stream's, pull's, compute's or push's.
  absl::StatusOr<StepTimes> RunCtrStep(CtrPipeline& pipeline, int64_t clock,
                                       bool prefetch_next);
  // RunCtrStep's steps. Fills the slot of step `clock` with its batch and
  // starts its pull. Errors: the stream's.
  absl::Status StartCtrPull(CtrPipeline& pipeline, int64_t clock);
  // Waits for the pull of step `clock` (made ahead, or started now). Errors:
  // the stream's, the pull's (the push's when a failed push cancelled it).
  absl::Status AwaitCtrPull(CtrPipeline& pipeline, int64_t clock);
  // Computes the gradients of step `clock`'s slot (clipped); returns the
  // loss. Errors: the model's.
  absl::StatusOr<float> ComputeCtrStep(CtrPipeline& pipeline, int64_t clock);
  // Starts the push of step `clock`'s slot (no push in flight).
  void StartCtrPush(CtrPipeline& pipeline, int64_t clock);
  // Waits for the push in flight, if any, and records it. Errors: the push's.
  absl::Status FinishCtrPush(CtrPipeline& pipeline);
  // AUC, log loss and accuracy (at 0.5) of the CTR model at `clock` on the
  // test file, streamed (`final` as for Evaluate).
  absl::StatusOr<Evaluation> EvaluateCtr(int64_t clock, bool final);
  // Evaluate or EvaluateCtr, whichever the model is.
  absl::StatusOr<Evaluation> EvaluateModel(int64_t clock, bool final);
  // Makes `client` the trainer's parameter client (the one Stop() cancels).
  void InstallClient(std::unique_ptr<ParameterClient> client);
  // Reads the training set (and on worker 0 the test set, into test_) and
  // checks it against the model. Errors: unreadable files, a wrong
  // input_dim or num_classes.
  absl::StatusOr<Dataset> LoadData();
  // Creates model_ (and eval_model_ for reduced precision) and client_, and
  // makes the client the one Stop() cancels.
  absl::Status BuildModelAndClient();
  // This worker's partition and clocks; opens the ack log. Errors: a batch
  // larger than the worker's part, an ack log that cannot be opened, the
  // servers' resume clock.
  absl::StatusOr<Plan> MakePlan(const Dataset& train);
  // MakePlan over `partition_or`, holding this worker's part of the data as
  // the part of index `worker_in_partition`.
  absl::StatusOr<Plan> MakePlan(absl::StatusOr<DataPartition> partition_or,
                                int worker_in_partition);
  // One step at `clock`: pull (or wait for the prefetched pull, and start the
  // next one if `prefetch_next`), compute gradients on `batch_order`, push
  // (or start the push). Errors: the pull's, compute's or push's.
  absl::StatusOr<StepTimes> RunStep(const Dataset& train,
                                    std::span<const int64_t> batch_order,
                                    int64_t clock, bool prefetch_next,
                                    Pipeline& pipeline);
  // The error to report for a failed pull: the push's error when the pull
  // was cancelled because a push in flight failed, else `pulled`.
  absl::Status PullFailed(absl::Status pulled, Pipeline& pipeline);
  // Observes one step's timings and counters in metrics_.
  // Exports what gradient clipping did to this step's gradient.
  void RecordClipping(const ClipResult& clip);
  void RecordStepMetrics(const StepTimes& times, int batch,
                         CounterMarks* marks);
  // Reports the interval that ends with the step at `clock` (at `now`), and
  // starts a new one; at an epoch's end, waits for the push in flight and
  // ends the epoch (EndEpoch).
  absl::Status ReportInterval(int epoch, int64_t clock, bool epoch_end,
                              const Plan& plan, absl::Time now,
                              Interval* interval, Pipeline& pipeline);
  // Adds the step at `clock` (`times`) to `interval`, and reports it
  // (ReportInterval) once options_.report_interval has passed since it
  // started or at an epoch's end. Errors: ReportInterval's.
  absl::Status AddToInterval(const StepTimes& times, int epoch, int64_t clock,
                             bool epoch_end, const Plan& plan,
                             Interval* interval, Pipeline& pipeline);
  // Records an acknowledged push of `clock`: the ack log line and the push
  // metrics (`blocked`: how long training waited for it).
  void RecordPush(int64_t clock, absl::Duration took, absl::Duration blocked);
  // Waits for the push in flight, if any, and records it. Errors: the push's.
  absl::Status FinishPush(AsyncPusher& pusher);
  // Test accuracy of the parameters at `clock`; with `final`, of the
  // parameters holding every worker's updates below `clock` (the job's final
  // model, whatever the consistency model).
  absl::StatusOr<float> Evaluate(int64_t clock, bool final = false);
  // Reports the end of an epoch (`last`: of the job). Worker 0 first measures
  // test accuracy and, after the last epoch, uploads the model.
  absl::Status EndEpoch(v1::ProgressReport report, bool last);
  // Sizes `pipeline`'s batch buffers and starts its pusher and puller as
  // the options say (a failed push cancels the client's calls).
  void StartPipeline(int batch, int dim, Pipeline& pipeline);
  // Cancels the client's calls if the pipeline left one in flight (training
  // ended on an error). For an absl::Cleanup beside the pipeline.
  void EndCallsInFlight(Pipeline& pipeline);
  // Ends the job's last epoch for a place whose every clock (of
  // `total_clocks`) was pushed before: the final report, no training.
  absl::Status EndAfterLastClock(int64_t total_clocks);
  // Makes `ctx` the coordinator call that Stop() cancels (null: none).
  // Returns false, and registers nothing, once stopped.
  bool TrackCall(grpc::ClientContext* ctx);
  // Sends a report; a reply asking to stop sets stop_.
  void Report(v1::ProgressReport report, bool must_arrive);
  // Worker 0, after its final evaluation: uploads params_ (the parameters it
  // evaluated at `clock`) with their test accuracy to the coordinator,
  // retrying with backoff for up to options_.upload_window. Does nothing
  // without a coordinator. Errors: the last error once retrying gives up or on
  // a non-retryable one; CANCELLED (and stop_ set) if the job is no longer
  // running.
  absl::Status UploadModel(int64_t clock, const Evaluation& evaluation);

  const v1::Assignment assignment_;
  const std::function<std::string()> node_id_;
  v1::ClusterService::Stub* const coordinator_;
  Backend* const backend_;
  WorkerMetrics* const metrics_;
  const TrainerOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> ready_for_{0};  // ReadyForMembership().
  // What Stop() cancels: the parameter client once created (it lives as long
  // as the trainer) and the coordinator call in flight.
  absl::Mutex stop_mu_;
  ParameterClient* live_client_ ABSL_GUARDED_BY(stop_mu_) = nullptr;
  grpc::ClientContext* live_call_ ABSL_GUARDED_BY(stop_mu_) = nullptr;

  std::unique_ptr<Model> model_;         // Null for a CTR model.
  std::unique_ptr<CtrModel> ctr_model_;  // Only for a CTR model.
  int64_t ctr_test_samples_ = 0;         // Worker 0, CTR models.
  // A float32 copy of the model for evaluation when training in fp16/bf16.
  std::unique_ptr<Model> eval_model_;
  // With local SGD (spec.local_sgd): the worker's local rounds.
  std::unique_ptr<LocalSgd> local_sgd_;
  std::unique_ptr<ParameterClient> client_;
  std::ofstream ack_log_;
  std::ofstream sample_log_;  // Elastic jobs, options_.sample_log.
  // The latest assignment offered (OfferAssignment); starts as assignment_.
  absl::Mutex latest_mu_;
  v1::Assignment latest_ ABSL_GUARDED_BY(latest_mu_);
  // The shard map version the client plans under (server moves), and its
  // map (CancelOnReaddress).
  std::atomic<int64_t> client_map_version_{assignment_.shard_map().version()};
  v1::ShardMap client_map_ ABSL_GUARDED_BY(latest_mu_) =
      assignment_.shard_map();
  // The clocks of the last push started and of the last acknowledged, and
  // the push kept by KeepUnacknowledgedPush (training thread only).
  int64_t pushing_clock_ = -1;
  int64_t acked_clock_ = -1;
  struct UnackedPush {
    int64_t clock = -1;
    std::vector<std::vector<float>> grads;
  };
  std::optional<UnackedPush> unacked_;
  Dataset test_;
  std::vector<std::vector<float>> params_;
};

// True for a server's refusal of a request made under an older shard map
// (a server move: "map_version: ..."); the worker fetches the new map.
bool IsMapChange(const absl::Status& status);

// True for such a refusal by a server whose map is older than
// `client_version`: it has not taken the client's map yet, and will.
bool ServerBehind(const absl::Status& status, int64_t client_version);

}  // namespace ps

#endif  // PS_WORKER_TRAINER_H_

// Hyperparameter sweeps: runs each trial of a sweep as a job through the
// JobManager's public API, stops trials that fall behind (median stopping),
// keeps the best, and persists every sweep in the job table so that a
// coordinator restart resumes it. Knows nothing of gRPC.
#ifndef PS_COORDINATOR_SWEEP_MANAGER_H_
#define PS_COORDINATOR_SWEEP_MANAGER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_table.h"
#include "coordinator/request_validation.h"
#include "ps/v1/sweep.pb.h"

namespace ps {

// Thread-safe. Lock order: the sweep manager's lock, then the JobManager's
// (it never calls back).
class SweepManager {
 public:
  // Receives a sweep's status after every change; called with the manager's
  // lock held, so it must not call back into the manager.
  using Watcher = std::function<void(const v1::SweepStatus&)>;

  // Loads the sweeps of `table` and resumes the running ones: a trial that
  // was being submitted when the coordinator stopped is found again by its
  // job name among `jobs`' jobs, so no trial is submitted twice. `table`,
  // `jobs` and `metrics` must outlive the manager; `limits` are the
  // JobManager's (trial specs are checked against them at submit). Errors:
  // the table's.
  static absl::StatusOr<std::unique_ptr<SweepManager>> Create(
      JobTable* table, JobManager* jobs, CoordinatorMetrics* metrics,
      JobLimits limits = {});

  // Validates a sweep and every trial's job spec (ValidateSweepSpec:
  // INVALID_ARGUMENT naming the field), stores it and returns its id; its
  // trials are submitted by Tick.
  absl::StatusOr<std::string> Submit(v1::SweepSpec spec);
  // NOT_FOUND for an unknown sweep; INVALID_ARGUMENT for a malformed id.
  absl::StatusOr<v1::SweepStatus> Get(const std::string& sweep_id) const;
  // Every sweep in id order, spec.base cleared.
  std::vector<v1::SweepStatus> List() const;
  // Cancels a running sweep and its running trials' jobs. NOT_FOUND;
  // FAILED_PRECONDITION if it ended.
  absl::StatusOr<v1::SweepStatus> Cancel(const std::string& sweep_id);

  // Calls `watcher` with the current status now and after every change until
  // Unwatch. NOT_FOUND for an unknown sweep.
  absl::StatusOr<int64_t> Watch(const std::string& sweep_id, Watcher watcher);
  // After it returns, the watcher is never called again.
  void Unwatch(int64_t token);

  // Follows the running trials' jobs (epochs, accuracy, end), stops trials
  // behind the median, submits the next trials up to max_concurrent_trials,
  // and ends sweeps whose trials all ended. Call periodically.
  void Tick(absl::Time now);

 private:
  struct Sweep {
    v1::SweepStatus status;
    // No submit before this (after a refused one: RESOURCE_EXHAUSTED).
    absl::Time retry_submit_at = absl::InfinitePast();
  };

  SweepManager(JobTable* table, JobManager* jobs, CoordinatorMetrics* metrics,
               JobLimits limits);

  absl::Status Load();
  // One step of a running sweep (Tick).
  void Advance(Sweep& sweep, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads a running trial's job: its epochs' accuracies, and how it ended.
  void Follow(v1::SweepTrial& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Median stopping over the running trials.
  void StopLaggards(Sweep& sweep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submits pending trials up to max_concurrent_trials.
  void SubmitTrials(Sweep& sweep, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels a trial's job (JobManager::CancelAsync) without waiting for the
  // write; returns the checks' error (NOT_FOUND, FAILED_PRECONDITION). A
  // failed write is logged.
  absl::Status CancelTrialJob(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists the sweep and publishes it to watchers.
  void Changed(const Sweep& sweep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobTable* const table_;
  JobManager* const jobs_;
  CoordinatorMetrics* const metrics_;
  const JobLimits limits_;

  mutable absl::Mutex mu_;
  std::map<std::string, Sweep> sweeps_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::pair<std::string, Watcher>> watchers_
      ABSL_GUARDED_BY(mu_);
  int64_t next_watch_token_ ABSL_GUARDED_BY(mu_) = 1;
};

// True for TRIAL_SUCCEEDED, TRIAL_FAILED, TRIAL_STOPPED and TRIAL_CANCELLED.
bool IsTrialEnded(v1::TrialState state);
// True for SWEEP_SUCCEEDED, SWEEP_FAILED and SWEEP_CANCELLED.
bool IsSweepEnded(v1::SweepState state);

}  // namespace ps

#endif  // PS_COORDINATOR_SWEEP_MANAGER_H_

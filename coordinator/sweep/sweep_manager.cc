#include "coordinator/sweep/sweep_manager.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/sweep/median_stopping.h"
#include "coordinator/sweep/sweep_validation.h"
#include "google/protobuf/util/message_differencer.h"

namespace ps {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// How long a sweep waits before submitting again after SubmitJob refused a
// trial for lack of room (RESOURCE_EXHAUSTED: --max_jobs).
constexpr absl::Duration kSubmitRetry = absl::Seconds(2);

bool IsActive(v1::TrialState state) {
  return state == v1::TRIAL_SUBMITTING || state == v1::TRIAL_RUNNING;
}

std::string Describe(const v1::SweepTrial& trial) {
  std::vector<std::string> shown;
  for (const auto& a : trial.parameters()) shown.push_back(FormatAssignment(a));
  return absl::StrJoin(shown, ", ");
}

AccuracyCurve CurveOf(const v1::SweepTrial& trial) {
  return AccuracyCurve(trial.accuracy_by_epoch().begin(),
                       trial.accuracy_by_epoch().end());
}

// The best SUCCEEDED trial (the first on a tie), or -1.
void UpdateBest(v1::SweepStatus& status) {
  int best = -1;
  float best_accuracy = 0;
  for (const v1::SweepTrial& t : status.trials()) {
    if (t.state() != v1::TRIAL_SUCCEEDED) continue;
    if (best < 0 || t.final_accuracy() > best_accuracy) {
      best = t.index();
      best_accuracy = t.final_accuracy();
    }
  }
  status.set_best_trial(best);
  status.set_best_accuracy(best < 0 ? 0 : best_accuracy);
}

}  // namespace

bool IsSweepEnded(v1::SweepState state) {
  return state == v1::SWEEP_SUCCEEDED || state == v1::SWEEP_FAILED ||
         state == v1::SWEEP_CANCELLED;
}

absl::Status SweepManager::CancelTrialJob(const std::string& job_id) {
  return jobs_->CancelAsync(
      job_id, [job_id](const absl::StatusOr<v1::JobStatus>& job) {
        if (!job.ok()) {
          PS_LOG_ERROR("sweep trial ", job_id, ": ", job.status().message());
        }
      });
}

bool IsTrialEnded(v1::TrialState state) {
  return state == v1::TRIAL_SUCCEEDED || state == v1::TRIAL_FAILED ||
         state == v1::TRIAL_STOPPED || state == v1::TRIAL_CANCELLED;
}

SweepManager::SweepManager(JobTable* table, JobManager* jobs,
                           CoordinatorMetrics* metrics, JobLimits limits)
    : table_(table), jobs_(jobs), metrics_(metrics), limits_(limits) {}

absl::StatusOr<std::unique_ptr<SweepManager>> SweepManager::Create(
    JobTable* table, JobManager* jobs, CoordinatorMetrics* metrics,
    JobLimits limits) {
  std::unique_ptr<SweepManager> manager(
      new SweepManager(table, jobs, metrics, limits));
  PS_RETURN_IF_ERROR(manager->Load());
  return manager;
}

absl::Status SweepManager::Load() {
  PS_ASSIGN_OR_RETURN(auto stored, table_->LoadSweeps());
  // Job names of the trials being submitted when the coordinator stopped, to
  // look up among the jobs once.
  std::map<std::string, std::string> job_of_name;
  bool resolving = false;
  for (const v1::SweepStatus& s : stored) {
    for (const v1::SweepTrial& t : s.trials()) {
      resolving |= t.state() == v1::TRIAL_SUBMITTING;
    }
  }
  if (resolving) {
    for (const v1::JobStatus& job : jobs_->List()) {
      job_of_name.emplace(job.spec().name(), job.job_id());
    }
  }
  absl::MutexLock lock(&mu_);
  for (v1::SweepStatus& s : stored) {
    Sweep& sweep = sweeps_[s.sweep_id()];
    sweep.status = std::move(s);
    bool changed = false;
    for (v1::SweepTrial& t : *sweep.status.mutable_trials()) {
      if (t.state() != v1::TRIAL_SUBMITTING) continue;
      // Its job exists if SubmitJob acknowledged it before the stop (the
      // job's record is written before the acknowledgement); else it is
      // submitted again, for the first time.
      auto it = job_of_name.find(t.job_name());
      if (it != job_of_name.end()) {
        t.set_job_id(it->second);
        t.set_state(v1::TRIAL_RUNNING);
      } else {
        t.set_state(v1::TRIAL_PENDING);
      }
      changed = true;
    }
    if (changed) Changed(sweep);
    if (sweep.status.state() == v1::SWEEP_RUNNING) {
      PS_LOG_INFO("sweep ", sweep.status.sweep_id(), " resumed");
    }
  }
  UpdateGauges();
  return absl::OkStatus();
}

absl::StatusOr<std::string> SweepManager::Submit(v1::SweepSpec spec) {
  ApplySweepDefaults(&spec);
  PS_ASSIGN_OR_RETURN(std::vector<TrialAssignments> trials,
                      ValidateSweepSpec(spec, limits_));
  v1::SweepStatus status;
  *status.mutable_spec() = std::move(spec);
  status.set_state(v1::SWEEP_RUNNING);
  status.set_best_trial(-1);
  status.set_create_time_ms(NowMs());
  for (size_t i = 0; i < trials.size(); ++i) {
    v1::SweepTrial* t = status.add_trials();
    t->set_index(static_cast<int>(i));
    for (auto& a : trials[i]) *t->add_parameters() = std::move(a);
    t->set_state(v1::TRIAL_PENDING);
  }
  absl::MutexLock lock(&mu_);
  // The id is handed out with the first write; the trials' job names follow
  // from it, so the record is written again with them before any submit.
  PS_RETURN_IF_ERROR(table_->CreateSweep(&status));
  const std::string id = status.sweep_id();
  for (v1::SweepTrial& t : *status.mutable_trials()) {
    t.set_job_name(TrialJobName(id, t.index()));
  }
  Sweep& sweep = sweeps_[id];
  sweep.status = std::move(status);
  PS_LOG_INFO("sweep ", id, " submitted: ", sweep.status.trials_size(),
              " trials, at most ", sweep.status.spec().max_concurrent_trials(),
              " at once");
  Changed(sweep);
  SubmitTrials(sweep, absl::Now());
  return id;
}

absl::StatusOr<v1::SweepStatus> SweepManager::Get(
    const std::string& sweep_id) const {
  PS_RETURN_IF_ERROR(ValidateId("sweep_id", sweep_id));
  absl::MutexLock lock(&mu_);
  auto it = sweeps_.find(sweep_id);
  if (it == sweeps_.end()) {
    return absl::NotFoundError(absl::StrCat("no sweep ", sweep_id));
  }
  return it->second.status;
}

std::vector<v1::SweepStatus> SweepManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::SweepStatus> list;
  for (const auto& [id, sweep] : sweeps_) {
    list.push_back(sweep.status);
    list.back().mutable_spec()->clear_base();
  }
  return list;
}

absl::StatusOr<v1::SweepStatus> SweepManager::Cancel(
    const std::string& sweep_id) {
  PS_RETURN_IF_ERROR(ValidateId("sweep_id", sweep_id));
  absl::MutexLock lock(&mu_);
  auto it = sweeps_.find(sweep_id);
  if (it == sweeps_.end()) {
    return absl::NotFoundError(absl::StrCat("no sweep ", sweep_id));
  }
  Sweep& sweep = it->second;
  if (IsSweepEnded(sweep.status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("sweep ", sweep_id, " already ended (",
                     v1::SweepState_Name(sweep.status.state()), ")"));
  }
  for (v1::SweepTrial& t : *sweep.status.mutable_trials()) {
    if (IsTrialEnded(t.state())) continue;
    if (!t.job_id().empty()) {
      // Not waited for here (a gRPC callback thread): the job is cancelled
      // in memory at once, and its record is written by the job table's
      // writer.
      absl::Status cancelled = CancelTrialJob(t.job_id());
      if (!cancelled.ok() && !absl::IsFailedPrecondition(cancelled) &&
          !absl::IsNotFound(cancelled)) {
        PS_LOG_ERROR("sweep ", sweep_id, ": cancelling ", t.job_id(), ": ",
                     cancelled.ToString());
      }
    }
    t.set_state(v1::TRIAL_CANCELLED);
    t.set_message("the sweep was cancelled");
  }
  sweep.status.set_state(v1::SWEEP_CANCELLED);
  sweep.status.set_message("cancelled");
  sweep.status.set_end_time_ms(NowMs());
  Changed(sweep);
  return sweep.status;
}

absl::StatusOr<int64_t> SweepManager::Watch(const std::string& sweep_id,
                                            Watcher watcher) {
  PS_RETURN_IF_ERROR(ValidateId("sweep_id", sweep_id));
  absl::MutexLock lock(&mu_);
  auto it = sweeps_.find(sweep_id);
  if (it == sweeps_.end()) {
    return absl::NotFoundError(absl::StrCat("no sweep ", sweep_id));
  }
  watcher(it->second.status);
  const int64_t token = next_watch_token_++;
  watchers_.emplace(token, std::make_pair(sweep_id, std::move(watcher)));
  return token;
}

void SweepManager::Unwatch(int64_t token) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(token);
}

void SweepManager::Tick(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, sweep] : sweeps_) {
    if (sweep.status.state() != v1::SWEEP_RUNNING) continue;
    const v1::SweepStatus before = sweep.status;
    Advance(sweep, now);
    if (!google::protobuf::util::MessageDifferencer::Equals(before,
                                                            sweep.status)) {
      Changed(sweep);
    }
  }
}

void SweepManager::Advance(Sweep& sweep, absl::Time now) {
  for (v1::SweepTrial& t : *sweep.status.mutable_trials()) {
    if (t.state() == v1::TRIAL_RUNNING) Follow(t);
  }
  if (sweep.status.spec().early_stopping().has_median()) StopLaggards(sweep);
  SubmitTrials(sweep, now);
  UpdateBest(sweep.status);
  v1::SweepStatus& status = sweep.status;
  int ended = 0, succeeded = 0;
  for (const v1::SweepTrial& t : status.trials()) {
    ended += IsTrialEnded(t.state());
    succeeded += t.state() == v1::TRIAL_SUCCEEDED;
  }
  if (ended < status.trials_size()) return;
  status.set_end_time_ms(NowMs());
  if (succeeded == 0) {
    status.set_state(v1::SWEEP_FAILED);
    status.set_message(
        absl::StrCat("no trial of ", status.trials_size(), " succeeded"));
  } else {
    const v1::SweepTrial& best = status.trials(status.best_trial());
    status.set_state(v1::SWEEP_SUCCEEDED);
    status.set_message(absl::StrFormat(
        "best: trial %d (%s, %s), test accuracy %.4f", best.index(),
        Describe(best), best.job_id(), best.final_accuracy()));
  }
  PS_LOG_INFO("sweep ", status.sweep_id(), " ended: ", status.message());
}

void SweepManager::Follow(v1::SweepTrial& trial) {
  auto job = jobs_->Get(trial.job_id());
  if (!job.ok()) {
    trial.set_state(v1::TRIAL_FAILED);
    trial.set_message(absl::StrCat("its job ", trial.job_id(),
                                   " is gone: ", job.status().message()));
    return;
  }
  for (const v1::EpochRecord& r : job->progress().epochs()) {
    if (r.epoch() < 1 || r.epoch() > 100000) continue;
    while (trial.accuracy_by_epoch_size() < r.epoch()) {
      trial.add_accuracy_by_epoch(0);
    }
    trial.set_accuracy_by_epoch(r.epoch() - 1, r.test_accuracy());
  }
  if (trial.accuracy_by_epoch_size() > 0) {
    trial.set_final_accuracy(*std::max_element(
        trial.accuracy_by_epoch().begin(), trial.accuracy_by_epoch().end()));
  }
  switch (job->state()) {
    case v1::SUCCEEDED:
      trial.set_state(v1::TRIAL_SUCCEEDED);
      trial.set_final_accuracy(job->progress().test_accuracy());
      break;
    case v1::FAILED:
      trial.set_state(v1::TRIAL_FAILED);
      trial.set_message(job->message());
      break;
    case v1::CANCELLED:
      trial.set_state(v1::TRIAL_FAILED);
      trial.set_message(absl::StrCat(
          "its job was cancelled outside the sweep: ", job->message()));
      break;
    default:
      break;
  }
}

void SweepManager::StopLaggards(Sweep& sweep) {
  const v1::MedianStopping& rule =
      sweep.status.spec().early_stopping().median();
  auto& trials = *sweep.status.mutable_trials();
  for (v1::SweepTrial& t : trials) {
    if (t.state() != v1::TRIAL_RUNNING) continue;
    std::vector<AccuracyCurve> others;
    for (const v1::SweepTrial& o : trials) {
      if (o.index() != t.index() && o.accuracy_by_epoch_size() > 0) {
        others.push_back(CurveOf(o));
      }
    }
    const AccuracyCurve curve = CurveOf(t);
    // The last epoch ends the trial anyway.
    if (curve.size() >=
        static_cast<size_t>(sweep.status.spec().base().epochs())) {
      continue;
    }
    if (!ShouldStopTrial(curve, others, rule.grace_epochs(),
                         rule.min_trials())) {
      continue;
    }
    absl::Status cancelled = CancelTrialJob(t.job_id());
    if (absl::IsFailedPrecondition(cancelled)) {
      continue;  // It ended meanwhile; the next Follow records how.
    }
    t.set_state(v1::TRIAL_STOPPED);
    t.set_stopped_early(true);
    t.set_message(absl::StrFormat(
        "stopped after epoch %d: best test accuracy %.4f is below the "
        "median of the other trials at that epoch",
        static_cast<int>(curve.size()),
        *std::max_element(curve.begin(), curve.end())));
    PS_LOG_INFO("sweep ", sweep.status.sweep_id(), ": trial ", t.index(), " (",
                t.job_id(), ") ", t.message());
  }
}

void SweepManager::SubmitTrials(Sweep& sweep, absl::Time now) {
  if (now < sweep.retry_submit_at) return;
  const v1::SweepSpec& spec = sweep.status.spec();
  int active = 0;
  for (const v1::SweepTrial& t : sweep.status.trials()) {
    active += IsActive(t.state());
  }
  for (v1::SweepTrial& t : *sweep.status.mutable_trials()) {
    if (active >= spec.max_concurrent_trials()) return;
    if (t.state() != v1::TRIAL_PENDING) continue;
    if (t.job_name().empty()) {
      t.set_job_name(TrialJobName(sweep.status.sweep_id(), t.index()));
    }
    auto job_spec = TrialJobSpec(
        spec, TrialAssignments(t.parameters().begin(), t.parameters().end()),
        t.job_name());
    if (!job_spec.ok()) {
      t.set_state(v1::TRIAL_FAILED);
      t.set_message(std::string(job_spec.status().message()));
      continue;
    }
    // The intent is durable before the job exists: a restart in between
    // finds the job by its name (Load) instead of submitting it again.
    t.set_state(v1::TRIAL_SUBMITTING);
    if (absl::Status s = table_->PutSweep(sweep.status); !s.ok()) {
      PS_LOG_ERROR("sweep ", sweep.status.sweep_id(), ": ", s.ToString());
      t.set_state(v1::TRIAL_PENDING);
      sweep.retry_submit_at = now + kSubmitRetry;
      return;
    }
    auto id = jobs_->Submit(*std::move(job_spec));
    if (!id.ok()) {
      if (absl::IsInvalidArgument(id.status())) {
        // Refused for good (checked at submit already; a coordinator
        // restarted with other limits may refuse it now).
        t.set_state(v1::TRIAL_FAILED);
        t.set_message(std::string(id.status().message()));
        continue;
      }
      // RESOURCE_EXHAUSTED (--max_jobs jobs pending or running), or the
      // table's error: no job was made; try again a little later.
      t.set_state(v1::TRIAL_PENDING);
      sweep.status.set_message(
          absl::StrCat("trial ", t.index(),
                       " waits to be submitted: ", id.status().message()));
      sweep.retry_submit_at = now + kSubmitRetry;
      return;
    }
    t.set_job_id(*id);
    t.set_state(v1::TRIAL_RUNNING);
    sweep.status.clear_message();
    ++active;
    PS_LOG_INFO("sweep ", sweep.status.sweep_id(), ": trial ", t.index(), " (",
                Describe(t), ") is job ", *id);
  }
}

void SweepManager::Changed(const Sweep& sweep) {
  if (absl::Status s = table_->PutSweep(sweep.status); !s.ok()) {
    PS_LOG_ERROR("sweep ", sweep.status.sweep_id(), ": ", s.ToString());
  }
  for (const auto& [token, watcher] : watchers_) {
    if (watcher.first == sweep.status.sweep_id()) watcher.second(sweep.status);
  }
  UpdateGauges();
}

void SweepManager::UpdateGauges() {
  std::map<v1::SweepState, int> sweeps;
  std::map<v1::TrialState, int> trials;
  for (const auto& [id, sweep] : sweeps_) {
    ++sweeps[sweep.status.state()];
    for (const v1::SweepTrial& t : sweep.status.trials()) ++trials[t.state()];
  }
  for (int s = v1::SWEEP_RUNNING; s <= v1::SWEEP_CANCELLED; ++s) {
    const auto state = static_cast<v1::SweepState>(s);
    metrics_->sweeps(state).Set(sweeps[state]);
  }
  for (int s = v1::TRIAL_PENDING; s <= v1::TRIAL_CANCELLED; ++s) {
    const auto state = static_cast<v1::TrialState>(s);
    metrics_->sweep_trials(state).Set(trials[state]);
  }
}

}  // namespace ps

#include "coordinator/job_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_progress.h"

namespace ps {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// ModelDigest of a spec's model ("" if it has no valid tensors: a stored
// spec was validated, so only a corrupt record has none).
std::string SpecModelDigest(const v1::JobSpec& spec) {
  auto tensors = ModelTensors(spec.model());
  return tensors.ok() ? ModelDigest(*tensors) : "";
}

}  // namespace

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED ||
         state == v1::CANCELLED;
}

JobManager::JobManager(JobTable* table, MembershipTiming timing,
                       CoordinatorMetrics* metrics, JobLimits limits)
    : table_(table),
      timing_(timing),
      metrics_(metrics),
      limits_(limits),
      nodes_(timing.lease) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(
    JobTable* table, MembershipTiming timing, CoordinatorMetrics* metrics,
    JobLimits limits) {
  std::unique_ptr<JobManager> manager(
      new JobManager(table, timing, metrics, limits));
  PS_RETURN_IF_ERROR(manager->Load());
  return manager;
}

absl::Status JobManager::Load() {
  PS_ASSIGN_OR_RETURN(auto jobs, table_->LoadAll());
  absl::MutexLock lock(&mu_);
  for (v1::JobStatus& status : jobs) {
    Job& job = jobs_[status.job_id()];
    job.status = std::move(status);
    // A spec stored before one of today's defaults existed gets it here, so
    // that every assignment carries a complete spec (servers and workers read
    // it as given). Defaults never change a field that is set.
    ApplyJobSpecDefaults(job.status.mutable_spec());
    job.model_digest = SpecModelDigest(job.status.spec());
    if (job.status.state() == v1::RUNNING) {
      // Its nodes will register again; until then every place is vacant.
      const absl::Time now = absl::Now();
      Slot vacant;
      vacant.vacant_since = now;
      job.servers.assign(job.status.spec().num_servers(), vacant);
      job.workers.assign(job.status.spec().num_workers(), vacant);
      for (size_t i = 0;
           i < job.servers.size() &&
           static_cast<int>(i) < job.status.shard_map().servers_size();
           ++i) {
        job.servers[i].last_address = job.status.shard_map().servers(i);
      }
      PublishVacancies(job);
      job.reports.assign(job.workers.size(), v1::ProgressReport());
      for (auto& r : job.reports) r.set_test_accuracy(-1);
      PS_LOG_INFO("job ", job.status.job_id(),
                  " was running: waiting for its nodes to register again");
    }
  }
  UpdateGauges();
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobManager::Submit(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  PS_RETURN_IF_ERROR(ValidateSubmittedSpec(spec, limits_));
  {
    absl::MutexLock lock(&mu_);
    PS_RETURN_IF_ERROR(CheckJobCount());
  }
  v1::JobStatus status;
  *status.mutable_spec() = std::move(spec);
  status.set_state(v1::PENDING);
  status.set_create_time_ms(NowMs());
  status.mutable_progress()->set_total_epochs(status.spec().epochs());
  status.mutable_progress()->set_test_accuracy(-1);
  absl::MutexLock lock(&mu_);
  // Checked again: another Submit may have queued a job meanwhile.
  PS_RETURN_IF_ERROR(CheckJobCount());
  // The table hands out the id and stores the record in one write, so two
  // submits never share an id and an acknowledged id always has its record.
  PS_RETURN_IF_ERROR(table_->Create(&status));
  const std::string id = status.job_id();
  auto [it, inserted] = jobs_.try_emplace(id);
  if (!inserted) {
    return absl::InternalError(
        absl::StrCat("job table handed out id ", id, ", which is in use"));
  }
  Job& job = it->second;
  job.status = std::move(status);
  job.model_digest = SpecModelDigest(job.status.spec());
  PS_LOG_INFO("job ", id, " submitted: ", job.status.spec().name());
  Publish(job);  // The table has the record already (Create).
  Schedule(absl::Now());
  return id;
}

absl::Status JobManager::CheckJobCount() const {
  int active = 0;
  for (const auto& [id, job] : jobs_) {
    if (!IsTerminal(job.status.state())) ++active;
  }
  if (active >= limits_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("jobs: ", active,
                     " jobs are pending or running, the coordinator's "
                     "limit (--max_jobs); submit again once one has ended"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobStatus> JobManager::Get(const std::string& job_id) const {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  return it->second.status;
}

std::vector<v1::JobStatus> JobManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobStatus> out;
  for (const auto& [id, job] : jobs_) out.push_back(job.status);
  return out;
}

absl::StatusOr<v1::JobStatus> JobManager::Cancel(const std::string& job_id) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  Job& job = it->second;
  if (IsTerminal(job.status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already ended (",
                     v1::JobState_Name(job.status.state()), ")"));
  }
  Finish(job, v1::CANCELLED, "cancelled by a client");
  return job.status;
}

absl::StatusOr<int64_t> JobManager::Watch(const std::string& job_id,
                                          Watcher watcher) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  watcher(it->second.status);
  return watchers_.Add(job_id, std::move(watcher));
}

void JobManager::Unwatch(int64_t token) {
  absl::MutexLock lock(&mu_);
  watchers_.Remove(token);
}

absl::StatusOr<v1::ProgressResponse> JobManager::ReportProgress(
    const v1::ProgressReport& report) {
  PS_RETURN_IF_ERROR(ValidateProgressReport(report));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(report.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job_id: no job \"", report.job_id(), "\""));
  }
  Job& job = it->second;
  v1::ProgressResponse response;
  if (job.status.state() != v1::RUNNING) {
    response.set_stop(true);
    return response;
  }
  const int w = report.worker_index();
  if (w < 0 || w >= static_cast<int>(job.workers.size()) ||
      job.workers[w].node_id != report.node_id()) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker_index: node ", report.node_id(), " is not worker ",
                     w, " of ", report.job_id()));
  }
  if (!report.error().empty()) {
    Finish(job, v1::FAILED, absl::StrCat("worker ", w, ": ", report.error()));
    response.set_stop(true);
    return response;
  }
  // Keep the latest accuracy even when this report carries none.
  v1::ProgressReport& latest = job.reports[w];
  const float accuracy = report.test_accuracy() >= 0 ? report.test_accuracy()
                                                     : latest.test_accuracy();
  latest = report;
  latest.set_test_accuracy(accuracy);
  AggregateProgress(job.reports, job.status.mutable_progress());
  // Worker 0 evaluates after each epoch: its report with an accuracy ends one.
  if (w == 0 && report.test_accuracy() >= 0) {
    RecordEpoch(report, NowMs(), job.status.mutable_progress());
  }
  const bool all_finished =
      std::all_of(job.reports.begin(), job.reports.end(),
                  [](const v1::ProgressReport& r) { return r.finished(); });
  if (all_finished) {
    Finish(job, v1::SUCCEEDED, "");
  } else {
    Changed(job);
  }
  return response;
}

void JobManager::Finish(Job& job, v1::JobState state,
                        const std::string& message) {
  job.status.set_state(state);
  job.status.set_message(message);
  job.status.set_end_time_ms(NowMs());
  job.status.clear_vacant();
  for (const auto* slots : {&job.servers, &job.workers}) {
    for (const Slot& slot : *slots) {
      nodes_.Release(slot.node_id, job.status.job_id());
    }
  }
  metrics_->finished(state).Increment();
  PS_LOG_INFO("job ", job.status.job_id(), " ", v1::JobState_Name(state),
              message.empty() ? "" : ": ", message);
  Changed(job);
}

void JobManager::Changed(Job& job) {
  if (auto s = table_->Put(job.status); !s.ok()) {
    PS_LOG_ERROR("job table: ", s.message());
  }
  Publish(job);
}

void JobManager::Publish(const Job& job) {
  watchers_.Publish(job.status);
  UpdateGauges();
}

void JobManager::UpdateGauges() {
  std::map<v1::JobState, int> counts;
  for (const auto& [id, job] : jobs_) ++counts[job.status.state()];
  for (v1::JobState s :
       {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    metrics_->jobs(s).Set(counts[s]);
  }
  metrics_->nodes("server").Set(nodes_.Count(v1::SERVER));
  metrics_->nodes("worker").Set(nodes_.Count(v1::WORKER));
  std::map<std::string, int> vacant;
  int64_t first_deadline_ms = 0;
  for (const auto& [id, job] : jobs_) {
    for (const v1::VacantPlace& place : job.status.vacant()) {
      ++vacant[place.role()];
      if (place.deadline_ms() > 0 &&
          (first_deadline_ms == 0 || place.deadline_ms() < first_deadline_ms)) {
        first_deadline_ms = place.deadline_ms();
      }
    }
  }
  metrics_->vacant_places("server").Set(vacant["server"]);
  metrics_->vacant_places("worker").Set(vacant["worker"]);
  metrics_->recovery_deadline.Set(first_deadline_ms / 1000.0);
}

}  // namespace ps

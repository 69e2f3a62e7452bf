#include "coordinator/job_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_progress.h"
#include "google/protobuf/util/message_differencer.h"

namespace ps {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// ModelDigest of a spec's model, its sparse tables included ("" if it has
// no valid tensors: a stored spec was validated, so only a corrupt record
// has none).
std::string SpecModelDigest(const v1::JobSpec& spec) {
  auto tensors = ModelTensors(spec.model());
  return tensors.ok() ? ModelDigest(*tensors, spec.model()) : "";
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
      nodes_(timing.lease),
      writer_(std::make_unique<JobStoreWriter>(table, metrics)) {}

JobManager::~JobManager() {
  // Everything queued is written, and its callbacks run (they may queue
  // more), while the manager is whole.
  writer_->Stop();
}

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
  PS_ASSIGN_OR_RETURN(const int64_t next_job_number, table_->NextJobNumber());
  PS_ASSIGN_OR_RETURN(auto request_ids, table_->LoadRequestIds());
  absl::MutexLock lock(&mu_);
  next_job_number_ = next_job_number;
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
      LoadMapChange(job);  // A server move: on the old map or the new one.
      job.servers.assign(job.status.shard_map().servers_size() > 0
                             ? job.status.shard_map().servers_size()
                             : job.status.spec().num_servers(),
                         vacant);
      job.workers.assign(job.status.spec().num_workers(), vacant);
      for (size_t i = 0;
           i < job.servers.size() &&
           static_cast<int>(i) < job.status.shard_map().servers_size();
           ++i) {
        job.servers[i].last_address = job.status.shard_map().servers(i);
      }
      job.reports.assign(job.workers.size(), NoReport());
      LoadMembership(job);  // Elastic: every place the job has had.
      PublishVacancies(job);
      PS_LOG_INFO("job ", job.status.job_id(),
                  " was running: waiting for its nodes to register again");
    }
  }
  for (auto& [request_id, job_id] : request_ids) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) continue;  // Left by a deletion cut short.
    it->second.request_id = request_id;
    request_ids_[request_id] = job_id;
  }
  UpdateGauges();
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobManager::Submit(v1::JobSpec spec,
                                               const std::string& request_id) {
  return AwaitResult<absl::StatusOr<std::string>>([&](SubmitDone done) {
    return SubmitAsync(std::move(spec), request_id, std::move(done));
  });
}

absl::Status JobManager::SubmitAsync(v1::JobSpec spec,
                                     const std::string& request_id,
                                     SubmitDone done) {
  ApplyJobSpecDefaults(&spec);
  PS_RETURN_IF_ERROR(ValidateSubmittedSpec(spec, limits_));
  if (!request_id.empty()) {
    PS_RETURN_IF_ERROR(ValidateId("request_id", request_id));
  }
  v1::JobStatus status;
  *status.mutable_spec() = std::move(spec);
  status.set_state(v1::PENDING);
  status.set_create_time_ms(NowMs());
  status.mutable_progress()->set_total_epochs(status.spec().epochs());
  status.mutable_progress()->set_test_accuracy(-1);
  status.mutable_progress()->set_test_auc(-1);
  status.mutable_progress()->set_test_log_loss(-1);
  std::optional<absl::StatusOr<std::string>> answer;
  {
    absl::MutexLock lock(&mu_);
    if (!request_id.empty() &&
        JoinEarlierSubmit(request_id, status.spec(), done, answer)) {
      if (!answer.has_value()) return absl::OkStatus();  // Answered later.
    } else {
      PS_RETURN_IF_ERROR(
          QueueSubmit(std::move(status), request_id, std::move(done)));
      return absl::OkStatus();
    }
  }
  done(*std::move(answer));
  return absl::OkStatus();
}

absl::Status JobManager::QueueSubmit(v1::JobStatus status,
                                     const std::string& request_id,
                                     SubmitDone done) {
  PS_RETURN_IF_ERROR(CheckJobCount());
  // Ids are handed out here, under the lock, in order; the writer stores the
  // advanced counter with the record, so an id is never handed out twice,
  // even across restarts.
  const std::string id = JobTable::JobId(next_job_number_++);
  status.set_job_id(id);
  writer_->Create(
      status, next_job_number_, request_id,
      [this, id](const absl::Status& written) { Submitted(id, written); });
  Submitting& submitting = submitting_[id];
  submitting.status = std::move(status);
  submitting.request_id = request_id;
  submitting.waiting.push_back(std::move(done));
  if (!request_id.empty()) request_ids_[request_id] = id;
  return absl::OkStatus();
}

bool JobManager::JoinEarlierSubmit(
    const std::string& request_id, const v1::JobSpec& spec, SubmitDone& done,
    std::optional<absl::StatusOr<std::string>>& answer) {
  auto known = request_ids_.find(request_id);
  if (known == request_ids_.end()) return false;
  const std::string& id = known->second;
  const v1::JobStatus* earlier = nullptr;
  auto pending = submitting_.find(id);
  auto job = jobs_.find(id);
  if (pending != submitting_.end()) {
    earlier = &pending->second.status;
  } else if (job != jobs_.end()) {
    earlier = &job->second.status;
  } else {
    return false;  // Its job was deleted: the id names nothing now.
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(earlier->spec(),
                                                          spec)) {
    answer = absl::AlreadyExistsError(
        absl::StrCat("request_id: \"", request_id, "\" already submitted job ",
                     id, ", with another spec; use a new request id"));
  } else if (pending != submitting_.end()) {
    pending->second.waiting.push_back(std::move(done));
  } else {
    PS_LOG_INFO("job ", id, ": submit retried (request id ", request_id, ")");
    answer = id;
  }
  return true;
}

void JobManager::Submitted(const std::string& id, const absl::Status& written) {
  std::vector<SubmitDone> waiting;
  {
    absl::MutexLock lock(&mu_);
    auto pending = submitting_.find(id);
    if (pending == submitting_.end()) return;
    waiting = std::move(pending->second.waiting);
    v1::JobStatus status = std::move(pending->second.status);
    const std::string request_id = std::move(pending->second.request_id);
    submitting_.erase(pending);
    if (!written.ok()) {
      // No job: a retry with the same request id submits anew.
      if (!request_id.empty()) request_ids_.erase(request_id);
    } else {
      Job& job = jobs_[id];
      job.status = std::move(status);
      job.model_digest = SpecModelDigest(job.status.spec());
      job.request_id = request_id;
      PS_LOG_INFO("job ", id, " submitted: ", job.status.spec().name());
      Publish(job);  // The table has the record already.
      Schedule(absl::Now());
    }
  }
  for (SubmitDone& done : waiting) {
    if (written.ok()) {
      done(id);
    } else {
      done(absl::UnavailableError(
          absl::StrCat("the job was not created: ", written.message())));
    }
  }
}

absl::Status JobManager::CheckJobCount() const {
  int active = static_cast<int>(submitting_.size());
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
  PS_ASSIGN_OR_RETURN(const Job* job, FindJobLocked(job_id));
  return job->status;
}

absl::StatusOr<JobManager::Job*> JobManager::FindJobLocked(
    const std::string& job_id, absl::string_view field) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat(field, ": no job \"", job_id, "\""));
  }
  return &it->second;
}

absl::StatusOr<const JobManager::Job*> JobManager::FindJobLocked(
    const std::string& job_id, absl::string_view field) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat(field, ": no job \"", job_id, "\""));
  }
  return &it->second;
}

std::vector<v1::JobStatus> JobManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobStatus> out;
  for (const auto& [id, job] : jobs_) out.push_back(job.status);
  return out;
}

absl::StatusOr<v1::JobStatus> JobManager::Cancel(const std::string& job_id) {
  return AwaitResult<absl::StatusOr<v1::JobStatus>>(
      [&](StatusDone done) { return CancelAsync(job_id, std::move(done)); });
}

absl::Status JobManager::CancelAsync(const std::string& job_id,
                                     StatusDone done) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(Job * found, FindJobLocked(job_id));
  Job& job = *found;
  if (IsTerminal(job.status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already ended (",
                     v1::JobState_Name(job.status.state()), ")"));
  }
  Finish(job, v1::CANCELLED, "cancelled by a client");
  // Finish queued the record; this answer waits for that write.
  writer_->Put(job.status, AnswerWhenDurable(std::move(done), job.status));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobManager::Watch(const std::string& job_id,
                                          Watcher watcher) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(const Job* job, FindJobLocked(job_id));
  watcher(job->status);
  return watchers_.Add(job_id, std::move(watcher));
}

void JobManager::Unwatch(int64_t token) {
  absl::MutexLock lock(&mu_);
  watchers_.Remove(token);
}

absl::StatusOr<v1::ProgressResponse> JobManager::ReportProgress(
    const v1::ProgressReport& report) {
  return AwaitResult<absl::StatusOr<v1::ProgressResponse>>(
      [&](ProgressDone done) {
        return ReportProgressAsync(report, std::move(done));
      });
}

absl::Status JobManager::ReportProgressAsync(const v1::ProgressReport& report,
                                             ProgressDone done) {
  PS_RETURN_IF_ERROR(ValidateProgressReport(report));
  v1::ProgressResponse response;
  {
    absl::MutexLock lock(&mu_);
    PS_ASSIGN_OR_RETURN(Job * found, FindJobLocked(report.job_id()));
    Job& job = *found;
    const int w = report.worker_index();
    if (job.status.state() != v1::RUNNING) {
      response.set_stop(true);
    } else if (w < 0 || w >= static_cast<int>(job.workers.size()) ||
               job.workers[w].node_id != report.node_id()) {
      return absl::PermissionDeniedError(
          absl::StrCat("worker_index: node ", report.node_id(),
                       " is not worker ", w, " of ", report.job_id()));
    } else if (!report.error().empty()) {
      response.set_stop(true);
      Finish(job, v1::FAILED, absl::StrCat("worker ", w, ": ", report.error()),
             AnswerWhenDurable(std::move(done), response));
      return absl::OkStatus();
    } else if (RecordProgress(job, report)) {
      Finish(job, v1::SUCCEEDED, "",
             AnswerWhenDurable(std::move(done), response));
      return absl::OkStatus();
    } else {
      // Coalesced: the reply does not wait for it, and the job's next
      // report within the window replaces it.
      writer_->Coalesce(job.status);
      Publish(job);
    }
  }
  done(response);
  return absl::OkStatus();
}

bool JobManager::RecordProgress(Job& job, const v1::ProgressReport& report) {
  const int w = report.worker_index();
  // CTR models and models with sparse tables (an EXTERNAL model's sharded
  // embeddings: a PyTorch DLRM) measure AUC and log loss.
  const v1::ModelSpec& model = job.status.spec().model();
  const v1::ProgressReport own =
      OwnMetrics(report, model.kind() == v1::ModelSpec::CTR ||
                             model.sparse_tables_size() > 0);
  // Keep the latest evaluation even when this report carries none.
  job.reports[w] = WithLatestEvaluation(job.reports[w], own);
  // Places that left an elastic job count no more.
  const std::vector<v1::ProgressReport> members = MemberReports(job);
  AggregateProgress(members, job.status.mutable_progress());
  // Worker 0 evaluates after each epoch: its report with an accuracy ends one.
  if (w == 0 && own.test_accuracy() >= 0) {
    RecordEpoch(own, NowMs(), job.status.mutable_progress());
  }
  return std::all_of(members.begin(), members.end(),
                     [](const v1::ProgressReport& r) { return r.finished(); });
}

void JobManager::Finish(Job& job, v1::JobState state,
                        const std::string& message,
                        JobStoreWriter::Done durable) {
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
  Changed(job, std::move(durable));
}

void JobManager::Changed(Job& job, JobStoreWriter::Done durable) {
  writer_->Put(job.status, std::move(durable));
  Publish(job);
}

bool JobManager::store_failed() const { return writer_->failed(); }

void JobManager::FlushStore() { writer_->Flush(); }

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

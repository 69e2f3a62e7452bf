// JobManager's ended jobs: DeleteJob, the retention policy, ListJobs paging,
// and telling servers which stored jobs they may delete.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"

namespace ps {

absl::Status JobManager::Delete(const std::string& job_id) {
  return AwaitResult<absl::Status>(
      [&](DeleteDone done) { return DeleteAsync(job_id, std::move(done)); });
}

absl::Status JobManager::DeleteAsync(const std::string& job_id,
                                     DeleteDone done) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(Job * found, FindJobLocked(job_id));
  Job& job = *found;
  const v1::JobState state = job.status.state();
  if (!IsTerminal(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has not ended (",
                     v1::JobState_Name(state), "); cancel it first"));
  }
  // Durable first: the job is listed until its deletion is written.
  job.deleting = true;
  writer_->Delete(
      job_id, job.request_id,
      [this, job_id, done = std::move(done)](const absl::Status& written) {
        Deleted(job_id, written);
        done(written);
      });
  return absl::OkStatus();
}

void JobManager::Deleted(const std::string& job_id,
                         const absl::Status& written) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;  // Deleted twice: the first one erased it.
  if (!written.ok()) {
    it->second.deleting = false;  // Kept, and tried again.
    return;
  }
  if (!it->second.request_id.empty()) {
    request_ids_.erase(it->second.request_id);
  }
  jobs_.erase(it);
  UpdateGauges();
  PS_LOG_INFO("job ", job_id, " deleted");
}

int JobManager::ApplyRetention(absl::Time now, const JobRetention& retention) {
  std::vector<std::string> expired;
  {
    absl::MutexLock lock(&mu_);
    expired = Expired(now, retention);
    for (const std::string& id : expired) {
      Job& job = jobs_.at(id);
      job.deleting = true;
      writer_->Delete(id, job.request_id, [this, id](const absl::Status& s) {
        if (!s.ok())
          PS_LOG_ERROR("retention: deleting ", id, ": ", s.message());
        Deleted(id, s);
      });
    }
  }
  if (expired.empty()) return 0;
  // The writer deletes them in a batch or a few; wait here, off the lock.
  writer_->Flush();
  absl::MutexLock lock(&mu_);
  int deleted = 0;
  for (const std::string& id : expired) {
    if (jobs_.count(id) == 0) ++deleted;
  }
  PS_LOG_INFO("retention: deleted ", deleted,
              " ended jobs (more ended jobs "
              "than kept, or ended too long ago)");
  return deleted;
}

std::vector<std::string> JobManager::Expired(
    absl::Time now, const JobRetention& retention) const {
  // Ended jobs, the first to end first.
  std::vector<std::pair<int64_t, std::string>> ended;
  for (const auto& [id, job] : jobs_) {
    if (IsTerminal(job.status.state()) && !job.deleting) {
      ended.emplace_back(job.status.end_time_ms(), id);
    }
  }
  std::sort(ended.begin(), ended.end());
  const size_t over =
      retention.max_ended_jobs > 0 &&
              ended.size() > static_cast<size_t>(retention.max_ended_jobs)
          ? ended.size() - retention.max_ended_jobs
          : 0;
  std::vector<std::string> expired;
  for (size_t i = 0; i < ended.size(); ++i) {
    const auto& [end_ms, id] = ended[i];
    const bool too_old = retention.max_age != absl::InfiniteDuration() &&
                         now - absl::FromUnixMillis(end_ms) > retention.max_age;
    if (i < over || too_old) expired.push_back(id);
  }
  return expired;
}

absl::StatusOr<JobPage> JobManager::ListPage(
    int page_size, const std::string& page_token) const {
  if (page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be >= 0, got ", page_size));
  }
  if (page_size == 0) page_size = kDefaultListPageSize;
  page_size = std::min(page_size, kMaxListPageSize);
  // A token is the last job id of the page before (JobTable::JobId); any
  // other text would silently list nothing, as if the listing had ended.
  if (!page_token.empty() && !JobTable::IsJobId(page_token)) {
    return absl::InvalidArgumentError(
        "page_token: not a token this coordinator handed out; pass a "
        "previous page's next_page_token as it was, or none for the first "
        "page");
  }
  JobPage page;
  absl::MutexLock lock(&mu_);
  auto it = page_token.empty() ? jobs_.begin() : jobs_.upper_bound(page_token);
  for (; it != jobs_.end() && static_cast<int>(page.jobs.size()) < page_size;
       ++it) {
    page.jobs.push_back(it->second.status);
  }
  if (it != jobs_.end()) page.next_page_token = page.jobs.back().job_id();
  return page;
}

std::vector<std::string> JobManager::EndedJobs(
    const std::vector<std::string>& stored_job_ids) const {
  std::vector<std::string> ended;
  absl::MutexLock lock(&mu_);
  const size_t n =
      std::min(stored_job_ids.size(), static_cast<size_t>(kMaxStoredJobIds));
  for (size_t i = 0; i < n; ++i) {
    const std::string& id = stored_job_ids[i];
    if (!ValidateId("stored_job_ids", id).ok()) continue;
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      ended.push_back(id);
      continue;
    }
    const v1::JobStatus& status = it->second.status;
    // A SUCCEEDED job's sparse rows stay on its servers until the job is
    // deleted: `psctl export` reads them there (docs/model-format.md).
    const bool rows_kept = status.state() == v1::SUCCEEDED &&
                           status.spec().model().sparse_tables_size() > 0;
    if (IsTerminal(status.state()) && !rows_kept) ended.push_back(id);
  }
  return ended;
}

}  // namespace ps

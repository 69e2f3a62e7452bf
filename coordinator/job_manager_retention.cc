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
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  const v1::JobState state = it->second.status.state();
  if (!IsTerminal(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has not ended (",
                     v1::JobState_Name(state), "); cancel it first"));
  }
  // Durable first: a job that failed to delete is still listed.
  PS_RETURN_IF_ERROR(table_->Delete(job_id));
  jobs_.erase(it);
  UpdateGauges();
  PS_LOG_INFO("job ", job_id, " deleted");
  return absl::OkStatus();
}

int JobManager::ApplyRetention(absl::Time now, const JobRetention& retention) {
  absl::MutexLock lock(&mu_);
  // Ended jobs, the first to end first.
  std::vector<std::pair<int64_t, std::string>> ended;
  for (const auto& [id, job] : jobs_) {
    if (IsTerminal(job.status.state())) {
      ended.emplace_back(job.status.end_time_ms(), id);
    }
  }
  std::sort(ended.begin(), ended.end());
  const size_t over =
      retention.max_ended_jobs > 0 &&
              ended.size() > static_cast<size_t>(retention.max_ended_jobs)
          ? ended.size() - retention.max_ended_jobs
          : 0;
  int deleted = 0;
  for (size_t i = 0; i < ended.size(); ++i) {
    const auto& [end_ms, id] = ended[i];
    const bool expired = retention.max_age != absl::InfiniteDuration() &&
                         now - absl::FromUnixMillis(end_ms) > retention.max_age;
    if (i >= over && !expired) continue;
    if (auto s = table_->Delete(id); !s.ok()) {
      PS_LOG_ERROR("retention: ", s.message());
      continue;
    }
    jobs_.erase(id);
    ++deleted;
    PS_LOG_INFO("job ", id, " deleted by the retention policy (",
                i < over ? "more ended jobs than kept" : "ended too long ago",
                ")");
  }
  if (deleted > 0) UpdateGauges();
  return deleted;
}

absl::StatusOr<JobPage> JobManager::ListPage(
    int page_size, const std::string& page_token) const {
  if (page_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be >= 0, got ", page_size));
  }
  if (page_size == 0) page_size = kDefaultListPageSize;
  page_size = std::min(page_size, kMaxListPageSize);
  if (!page_token.empty()) {
    PS_RETURN_IF_ERROR(ValidateId("page_token", page_token));
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
    if (it == jobs_.end() || IsTerminal(it->second.status.state())) {
      ended.push_back(id);
    }
  }
  return ended;
}

}  // namespace ps

#include "coordinator/job_watchers.h"

namespace ps {

int64_t JobWatchers::Add(const std::string& job_id, Watcher watcher) {
  const int64_t token = next_token_++;
  watchers_[token] = {job_id, std::move(watcher)};
  return token;
}

void JobWatchers::Remove(int64_t token) { watchers_.erase(token); }

void JobWatchers::Publish(const v1::JobStatus& status) const {
  for (const auto& [token, watch] : watchers_) {
    if (watch.first == status.job_id()) watch.second(status);
  }
}

}  // namespace ps

// The clients watching jobs (JobService.WatchJob): who is told of a job's
// status after each change.
#ifndef PS_COORDINATOR_JOB_WATCHERS_H_
#define PS_COORDINATOR_JOB_WATCHERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "ps/v1/job.pb.h"

namespace ps {

// Not thread-safe: JobManager calls it under its lock (so a watcher must not
// call back into the manager).
class JobWatchers {
 public:
  using Watcher = std::function<void(const v1::JobStatus&)>;

  // Registers `watcher` for `job_id`; returns a token for Remove.
  int64_t Add(const std::string& job_id, Watcher watcher);
  // After it returns, the watcher is never called again.
  void Remove(int64_t token);
  // Calls every watcher of status.job_id() with `status`.
  void Publish(const v1::JobStatus& status) const;

 private:
  std::map<int64_t, std::pair<std::string, Watcher>> watchers_;
  int64_t next_token_ = 1;
};

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_WATCHERS_H_

// What the coordinator keeps of ended jobs, and how ListJobs pages through
// the jobs it keeps. Implemented by JobManager (job_manager_retention.cc).
#ifndef PS_COORDINATOR_JOB_RETENTION_H_
#define PS_COORDINATOR_JOB_RETENTION_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "ps/v1/job.pb.h"

namespace ps {

// How long the coordinator keeps ended jobs (SUCCEEDED, FAILED, CANCELLED):
// their records and trained models in the job table. An expired job is
// deleted as by DeleteJob, and the servers then delete its shards. Pending and
// running jobs are never expired.
struct JobRetention {
  // Ended jobs kept at most; beyond, the ones that ended first are deleted.
  // 0: no limit. Default 100.
  int max_ended_jobs = 100;
  // An ended job is deleted this long after it ended. Default
  // absl::InfiniteDuration(): kept until max_ended_jobs or DeleteJob.
  absl::Duration max_age = absl::InfiniteDuration();
};

// ListJobs page sizes.
inline constexpr int kDefaultListPageSize = 100;
inline constexpr int kMaxListPageSize = 1000;

// Stored job ids a server may report in one heartbeat
// (HeartbeatRequest.held); more are not answered.
inline constexpr int kMaxStoredJobIds = 1000;

// One page of ListJobs.
struct JobPage {
  std::vector<v1::JobStatus> jobs;  // In job id order.
  std::string next_page_token;      // Empty on the last page.
};

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_RETENTION_H_

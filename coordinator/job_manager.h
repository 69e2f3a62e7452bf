// The coordinator's state: jobs (durable in the JobTable), cluster membership
// with leases, scheduling of pending jobs onto free nodes, and progress
// aggregation. Knows nothing of gRPC.
#ifndef PS_COORDINATOR_JOB_MANAGER_H_
#define PS_COORDINATOR_JOB_MANAGER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_table.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"

namespace ps {

struct MembershipTiming {
  // A node that has not heartbeaten for this long loses its lease.
  absl::Duration lease = absl::Seconds(5);
  // How often nodes are told to heartbeat.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
};

// Thread-safe.
class JobManager {
 public:
  // Receives a job's status after every change; called with the manager's lock
  // held, so it must not call back into the manager.
  using Watcher = std::function<void(const v1::JobStatus&)>;

  // Loads the table. Jobs that were RUNNING when the coordinator stopped are
  // marked FAILED (their workers' and servers' leases cannot be recovered yet).
  // `table` and `metrics` must outlive the manager.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(
      JobTable* table, MembershipTiming timing, CoordinatorMetrics* metrics);

  // Validates and queues a job; returns its id. INVALID_ARGUMENT names the
  // field.
  absl::StatusOr<std::string> Submit(v1::JobSpec spec);
  // NOT_FOUND for an unknown job.
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) const;
  std::vector<v1::JobStatus> List() const;
  // Cancels a pending or running job. NOT_FOUND; FAILED_PRECONDITION if it
  // ended.
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id);

  // Calls `watcher` with the current status now and after every change until
  // Unwatch. Returns a token for Unwatch. NOT_FOUND for an unknown job.
  absl::StatusOr<int64_t> Watch(const std::string& job_id, Watcher watcher);
  // After it returns, the watcher is never called again.
  void Unwatch(int64_t token);

  // Membership. Register always succeeds (INVALID_ARGUMENT for a bad role).
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request);
  // Renews the lease and returns the node's assignments. NOT_FOUND:
  // re-register.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& node_id);
  // Records a worker's progress; finishes or fails the job as reports say.
  // NOT_FOUND for an unknown job; the reply says stop once the job is not
  // running.
  absl::StatusOr<v1::ProgressResponse> ReportProgress(
      const v1::ProgressReport& report);

  // Expires leases (failing the jobs of lost nodes) and starts pending jobs on
  // free nodes. Call periodically.
  void Tick(absl::Time now);

 private:
  struct Node {
    v1::NodeRole role = v1::NODE_ROLE_UNSPECIFIED;
    std::string address;
    absl::Time last_seen;
    std::string job_id;  // Empty when free.
    int index = -1;      // Server or worker index in its job.
  };
  struct Job {
    v1::JobStatus status;
    std::vector<std::string> servers;  // Node ids by server index.
    std::vector<std::string> workers;  // Node ids by worker index.
    v1::ShardMap shard_map;
    std::vector<v1::ProgressReport> reports;  // Latest per worker.
  };

  JobManager(JobTable* table, MembershipTiming timing,
             CoordinatorMetrics* metrics);

  absl::Status Load();
  // Persists, publishes to watchers and updates gauges. Logs persistence
  // errors.
  void Changed(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a job to a terminal state and frees its nodes.
  void Finish(Job& job, v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Schedule(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Aggregate(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Assignment AssignmentOf(const Job& job, int index) const;

  JobTable* const table_;
  const MembershipTiming timing_;
  CoordinatorMetrics* const metrics_;

  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::pair<std::string, Watcher>> watchers_
      ABSL_GUARDED_BY(mu_);
  int64_t next_watch_token_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_node_ ABSL_GUARDED_BY(mu_) = 1;
};

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(v1::JobState state);

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_MANAGER_H_

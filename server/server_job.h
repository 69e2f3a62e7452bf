// One job's shards on one parameter server: block values, optimizer state, the
// workers' clocks, BSP accumulation, and pulls waiting on the staleness bound.
#ifndef PS_SERVER_SERVER_JOB_H_
#define PS_SERVER_SERVER_JOB_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model_layout.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/parameter.pb.h"
#include "server/clock_table.h"
#include "server/optimizer.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"

namespace ps {

// Thread-safe. Pull replies that must wait for slower workers are completed
// later, from the thread whose push let them through.
class ServerJob {
 public:
  // Receives the reply of a Pull, or why it failed; called exactly once.
  using PullCallback = std::function<void(absl::StatusOr<v1::PullResponse>)>;

  // Creates the job's shards for `assignment` (this server is
  // assignment.index()). If `store` holds the job, its blocks and clocks are
  // reloaded; otherwise blocks get their initial values and, unless durability
  // is MEMORY, are written to the store. `store` may be null (nothing is
  // persisted). Errors: INVALID_ARGUMENT for a bad spec, DATA_LOSS if stored
  // blocks do not match the shard map, and the store's errors.
  static absl::StatusOr<std::unique_ptr<ServerJob>> Open(
      const v1::Assignment& assignment, ShardStore* store,
      ServerMetrics* metrics);

  ~ServerJob();

  // Serves a pull once the reader's clock is within the staleness bound. Errors
  // (through `done`): FAILED_PRECONDITION for a stale shard map or a clock the
  // worker has not reached, INVALID_ARGUMENT for a bad worker or key, ABORTED
  // if the job is closed while waiting.
  void Pull(const v1::PullRequest& request, PullCallback done);

  // Applies (or, under BSP, accumulates) a push exactly once per (worker,
  // clock), and persists the update with the clock it advances before
  // returning. Errors: INVALID_ARGUMENT (unknown key, wrong size, NaN or Inf),
  // FAILED_PRECONDITION (stale map, clock gap), UNAVAILABLE if the store failed
  // (the job then refuses all requests). A refused push changes nothing.
  absl::StatusOr<v1::PushResponse> Push(const v1::PushRequest& request);

  // Fails every waiting pull with `reason` and refuses later requests.
  void Close(const absl::Status& reason);

  const std::string& job_id() const { return job_id_; }
  // The job's assignment as this server got it.
  const v1::Assignment& assignment() const { return assignment_; }
  // The slowest worker's clock.
  int64_t min_clock() const;

 private:
  struct Block {
    BlockSpec spec;
    std::vector<float> values;
    std::vector<float> state;  // Optimizer slots.
    std::vector<float> accum;  // BSP: gradient sum of the current clock.
    int64_t step = 0;          // Updates applied.
  };
  struct Waiter {
    int64_t clock;
    std::vector<uint64_t> keys;
    PullCallback done;
    absl::Time since;
  };
  using Ready =
      std::vector<std::pair<PullCallback, absl::StatusOr<v1::PullResponse>>>;

  ServerJob(const v1::Assignment& assignment, ShardStore* store,
            ServerMetrics* metrics, std::unique_ptr<Optimizer> optimizer,
            int64_t staleness);
  absl::Status Initialize(const std::vector<TensorSpec>& tensors);
  absl::Status Restore(StoredJob stored);
  absl::Status CheckRequest(int64_t map_version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateKeys(
      const google::protobuf::RepeatedField<uint64_t>& keys,
      std::vector<uint64_t>* out) const;
  absl::Status ValidateGradients(const v1::PushRequest& request) const;
  v1::PullResponse BuildReply(const std::vector<uint64_t>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `touched` blocks and the clocks in one batch (no-op without a
  // store).
  absl::Status Persist(const std::vector<size_t>& touched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the waiters the current min_clock lets through into `ready`.
  void CollectReady(Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const v1::Assignment assignment_;
  const std::string job_id_;
  ShardStore* const store_;  // Null for MEMORY durability.
  ServerMetrics* const metrics_;
  const std::unique_ptr<Optimizer> optimizer_;

  mutable absl::Mutex mu_;
  std::vector<Block> blocks_ ABSL_GUARDED_BY(mu_);  // Key order.
  absl::flat_hash_map<uint64_t, size_t> index_;     // Key -> blocks_ position.
  ClockTable clocks_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // Non-OK once closed or broken.
  std::vector<float> scratch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_JOB_H_

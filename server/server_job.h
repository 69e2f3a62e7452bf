// One job's shards on one parameter server: block values, optimizer state, the
// workers' clocks, BSP accumulation, and pulls waiting on the staleness bound.
#ifndef PS_SERVER_SERVER_JOB_H_
#define PS_SERVER_SERVER_JOB_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model_layout.h"
#include "common/parameter_wire.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/parameter.pb.h"
#include "server/clock_table.h"
#include "server/optimizer.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"

namespace ps {

// Thread-safe. Pulls that must wait for slower workers, and BSP pushes that
// wait for their clock, are completed later, from the thread whose push let
// them through.
class ServerJob {
 public:
  // Receives the reply of a Pull, or why it failed; called exactly once.
  using PullCallback = std::function<void(absl::StatusOr<v1::PullResponse>)>;
  // Receives the reply of a Pull as the serialized PullResponse, or why it
  // failed; called exactly once.
  using PullWireCallback = std::function<void(absl::StatusOr<WireMessage>)>;
  // Receives the reply of a Push, or why it failed; called exactly once.
  using PushCallback = std::function<void(absl::StatusOr<v1::PushResponse>)>;

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
  // worker has not reached, INVALID_ARGUMENT for a bad worker or an unknown or
  // repeated key, the Close reason if the job is closed while waiting,
  // RESOURCE_EXHAUSTED if it is dropped as kMaxWaitingPerWorker newer ones
  // wait.
  // The reply is serialized under the job's lock straight from the block
  // values (EncodePullResponse: one copy), for the server to send as is.
  void PullWire(const v1::PullRequest& request, PullWireCallback done);
  // The same, parsed into a message (tests).
  void Pull(const v1::PullRequest& request, PullCallback done);

  // Most pulls, and most pushes, of one worker that may wait here at once; a
  // further one drops the oldest (whose client has most likely given up) with
  // RESOURCE_EXHAUSTED. A live worker has one of each at most.
  static constexpr int kMaxWaitingPerWorker = 4;
  // Largest clock accepted from the store (DATA_LOSS beyond).
  static constexpr int64_t kMaxClock = int64_t{1} << 62;

  // Applies a push exactly once per (worker, clock) and acknowledges it only
  // once the update it contributes to is applied and persisted with the clock
  // it advances: at once under SSP/ASP; under BSP when the last worker's push
  // of the clock arrives. A push parked until then is never acknowledged if
  // the server dies, so the worker retries it and nothing acknowledged is
  // lost. A retry of an applied push is acknowledged with duplicate=true; a
  // retry of a parked one is parked too. A push with NaN or Inf is refused, or
  // under NON_FINITE_DROP acknowledged with none of its gradient applied here.
  // Gradients may come in any request.gradient_encoding (FP32, FP16, BF16,
  // whatever the job's mixed_precision.wire_gradients): 16-bit ones are
  // decoded to float32 (exactly) and then summed and applied as float32 ones.
  // Errors (through `done`): INVALID_ARGUMENT (not an encoding, unknown or
  // repeated key, wrong size for the encoding, NaN or Inf),
  // FAILED_PRECONDITION (stale map, clock gap), UNAVAILABLE
  // if the store failed (the job then refuses all requests), the Close reason
  // if the job closes while the push is parked, RESOURCE_EXHAUSTED if it is
  // dropped as kMaxWaitingPerWorker newer ones wait. A refused push changes
  // nothing. The gradient bytes are read during the call only (never after
  // it returns, even if `done` is parked), so they may point into the
  // buffers the request arrived in. Sizes, keys and finiteness are checked
  // before the job's lock is taken; the errors are reported in the order
  // above all the same.
  void Push(const PushView& request, PushCallback done);
  // The same for a parsed message.
  void Push(const v1::PushRequest& request, PushCallback done);

  // EXTERNAL models (ParameterService.Seed): sets the initial values of the
  // FROM_WORKER blocks this server holds, from worker 0's module, exactly
  // once. The first Seed must carry every such block (each once, float32,
  // finite); it is applied as a whole, persisted like an update (one store
  // write), and lets the waiting pulls through. Later ones (retries, a
  // replacement worker 0) return duplicate=true and change nothing. Errors:
  // INVALID_ARGUMENT (worker_index not 0, a missing, unknown, repeated or
  // non-FROM_WORKER block, a wrong size, NaN or Inf), FAILED_PRECONDITION
  // (stale map; no FROM_WORKER tensors), the Close reason, UNAVAILABLE if
  // the store failed. A refused Seed changes nothing.
  absl::StatusOr<v1::SeedResponse> Seed(const v1::SeedRequest& request);
  // False while blocks of FROM_WORKER tensors wait for Seed: until then
  // pulls wait (CanRead) and ParameterManager refuses pushes. The state is
  // in the blocks (kUnseededBits), so it survives a restart with them.
  bool seeded() const;

  // Fails every waiting pull and parked push with `reason` and refuses later
  // requests.
  void Close(const absl::Status& reason);

  const std::string& job_id() const { return job_id_; }
  // The job's assignment as this server got it.
  const v1::Assignment& assignment() const { return assignment_; }
  // The slowest worker's clock.
  int64_t min_clock() const;
  // Every worker's clock, as "[c0 c1 ...]" (for logs).
  std::string ClocksString() const;

 private:
  struct Block {
    BlockSpec spec;
    std::vector<float> values;
    std::vector<float> state;  // Optimizer slots.
    std::vector<float> accum;  // BSP: gradient sum of the current clock.
    int64_t step = 0;          // Updates applied.
  };
  struct Waiter {
    int worker;
    int64_t clock;
    bool final;  // PullRequest.final: waits for min_clock >= clock.
    std::vector<uint64_t> keys;
    PullWireCallback done;
    absl::Time since;
  };
  // A push's gradients checked before the lock (index_ and block sizes never
  // change after Open).
  struct GradientCheck {
    absl::Status invalid;           // Unknown or repeated key, wrong size.
    std::vector<size_t> positions;  // blocks_ position of each gradient.
    bool finite = true;             // No NaN or Inf anywhere.
    uint64_t non_finite_key = 0;    // The first block with one, if any.
  };
  struct ParkedPush {
    int worker;
    int64_t clock;
    bool duplicate;
    PushCallback done;
    absl::Time since;
  };
  // Callbacks made ready under the lock, run after it is released.
  struct Ready {
    std::vector<std::pair<PullWireCallback, absl::StatusOr<WireMessage>>> pulls;
    std::vector<std::pair<PushCallback, absl::StatusOr<v1::PushResponse>>>
        pushes;
    void Run();
  };

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
  GradientCheck CheckGradients(const PushView& request) const;
  WireMessage BuildReply(const std::vector<uint64_t>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `touched` blocks and the clocks in one batch (no-op without a
  // store).
  absl::Status Persist(const std::vector<size_t>& touched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True unless a block still holds kUnseededBits; caches a true answer in
  // seeded_ (blocks never become unseeded again).
  bool SeededLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when a read at `clock` may be answered now: seeded, and the
  // consistency bound, or for a final read every worker's pushes below
  // `clock`.
  bool CanRead(int64_t clock, bool final) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the pulls the current min_clock lets through, and the parked pushes
  // whose clock is applied, into `ready` (all of them, failed, once closed).
  void CollectReady(Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before `worker` parks one more pull (or push): if kMaxWaitingPerWorker of
  // its pulls (pushes) already wait, moves the oldest into `ready`, failed.
  void EvictOldestWaiting(int worker, bool pulls, Ready* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Push under the lock: returns the reply now, or nullopt if `done` was
  // parked.
  std::optional<absl::StatusOr<v1::PushResponse>> PushLocked(
      const PushView& request, const GradientCheck& check, PushCallback& done,
      Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const v1::Assignment assignment_;
  const std::string job_id_;
  ShardStore* const store_;  // Null for MEMORY durability.
  ServerMetrics* const metrics_;
  const std::unique_ptr<Optimizer> optimizer_;
  const bool drop_non_finite_;  // The job's policy is NON_FINITE_DROP.

  mutable absl::Mutex mu_;
  std::vector<Block> blocks_ ABSL_GUARDED_BY(mu_);  // Key order.
  absl::flat_hash_map<uint64_t, size_t> index_;     // Key -> blocks_ position.
  ClockTable clocks_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::vector<ParkedPush> parked_pushes_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // Non-OK once closed or broken.
  // Once true, stays true (SeededLocked); read without the lock by seeded().
  mutable std::atomic<bool> seeded_{false};
  // Buffers of pull replies, reused (two idle at most).
  const std::shared_ptr<WireBufferPool> reply_buffers_ =
      std::make_shared<WireBufferPool>(2);
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_JOB_H_

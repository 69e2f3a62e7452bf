// One job's shards on one parameter server. The job composes four parts, each
// with its own invariants: the table (values, optimizer state, BSP sums:
// server/parameter_table.h), the clocks and the consistency bound
// (server/clock_table.h), the requests held back (server/waiting_requests.h)
// and the path to the disk (server/durability_pipeline.h); it orders their
// steps under one lock and runs callbacks after releasing it.
#ifndef PS_SERVER_SERVER_JOB_H_
#define PS_SERVER_SERVER_JOB_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model_layout.h"
#include "common/parameter_wire.h"
#include "ps/storage/v1/update_log.pb.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/parameter.pb.h"
#include "server/block_clock.h"
#include "server/clock_table.h"
#include "server/durability_pipeline.h"
#include "server/optimizer.h"
#include "server/parameter_table.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"
#include "server/sparse_table_set.h"
#include "server/sparse_tier.h"
#include "server/waiting_requests.h"

namespace ps {

// How a ServerJob persists its shards.
struct ServerJobOptions {
  // Update-log bytes after which the job's whole state (values, optimizer
  // state, clocks) is written as a snapshot and the log it covers dropped.
  // Bounds both the log on disk and the replay after a crash. Default 32 MiB.
  int64_t snapshot_log_bytes = int64_t{32} << 20;
  // Bytes the job's sparse-table rows may hold in memory on this server
  // (--sparse_memory_bytes; docs/sparse.md, "Memory: the budget and the
  // estimate"): the rest live in a RocksDB tier. Default 0: no limit, every
  // row in memory, no tier.
  int64_t sparse_memory_bytes = 0;
  // The directory under which a job with a budget puts its tier (one
  // subdirectory per job, emptied when the job opens, removed when it
  // closes). Default empty: a temporary directory (under $TMPDIR, else /tmp)
  // removed when the job closes.
  std::string sparse_tier_dir{};
  // The server's budget, which its jobs' tables reserve from, so that all of
  // them together stay within sparse_memory_bytes. Default null: the job
  // alone gets sparse_memory_bytes. Must outlive the job.
  SparseMemoryBudget* sparse_budget = nullptr;
};

// The job's metadata as the store keeps it (ShardStore::PutJobMeta): the
// assignment without this server's index or a move in progress; a stored
// job whose metadata differs is not opened. Thread-safe.
std::string StoredJobMeta(const v1::Assignment& assignment);

// Thread-safe. Pulls that must wait for slower workers, and BSP pushes that
// wait for their clock, are completed later, from the thread whose push let
// them through.
class ServerJob {
 public:
  // Receives the reply of a Pull, or why it failed; called exactly once.
  using PullCallback = std::function<void(absl::StatusOr<v1::PullResponse>)>;
  // Receives the reply of a Pull as the serialized PullResponse, or why it
  // failed; called exactly once.
  using PullWireCallback = ::ps::PullWireCallback;
  // Receives the reply of a Push, or why it failed; called exactly once.
  using PushCallback = ::ps::PushCallback;

  // Creates the job's shards for `assignment` (this server is
  // assignment.index()). If `store` holds the job, its last snapshot is
  // reloaded and the update log after it replayed; otherwise blocks get their
  // initial values (from the initializers, or from the model file of
  // spec.init_from: LoadInitialModel) and, unless durability is MEMORY, are
  // written to the store as the first snapshot before Open returns. `store`
  // may be null (nothing is persisted).
  // Errors: INVALID_ARGUMENT for a bad spec (or an init_from file that does
  // not fit it), DATA_LOSS if stored blocks or log records do not match the
  // shard map (or the init_from file is damaged), NOT_FOUND for a missing
  // init_from file, and the store's errors.
  // With `initial` (a server move: the units this server owns under the
  // assignment's map, copied at the move's boundary), the job starts from
  // that state instead, and unless durability is MEMORY the store's copy of
  // the job is replaced by it (deleted, then written as the first snapshot,
  // before Open returns).
  static absl::StatusOr<std::unique_ptr<ServerJob>> Open(
      const v1::Assignment& assignment, ShardStore* store,
      ServerMetrics* metrics, const ServerJobOptions& options = {},
      StoredJob* initial = nullptr);

  // Closes the job (see Close).
  ~ServerJob();

  // Serves a pull once the reader's clock is within the staleness bound. Errors
  // (through `done`): FAILED_PRECONDITION for a stale shard map or a clock the
  // worker has not reached, INVALID_ARGUMENT for a bad worker or an unknown or
  // repeated key, the Close reason if the job is closed while waiting,
  // RESOURCE_EXHAUSTED if it is dropped as kMaxWaitingPerWorker newer ones
  // wait.
  // The reply is serialized under the job's lock straight from the block
  // values (EncodePullResponse: one copy), for the server to send as is,
  // into a buffer from `allocate` if set (else one of the job's own).
  void PullWire(const v1::PullRequest& request, PullWireCallback done,
                ReplyAllocator allocate = nullptr);
  // The same, parsed into a message (tests).
  void Pull(const v1::PullRequest& request, PullCallback done);

  // Most pulls, and most pushes, of one worker that may wait here at once; a
  // further one drops the oldest (whose client has most likely given up) with
  // RESOURCE_EXHAUSTED. A live worker has one of each at most.
  static constexpr int kMaxWaitingPerWorker = WaitingRequests::kMaxPerWorker;
  // Largest clock accepted from the store (DATA_LOSS beyond).
  static constexpr int64_t kMaxClock = int64_t{1} << 62;

  // Applies a push exactly once per (worker, clock) and acknowledges it only
  // once the update it contributes to is applied and its update-log record
  // (with the clock it advances) is durable: under SSP/ASP the push's own
  // update; under BSP the clock's averaged update, applied when the last
  // worker's push of the clock arrives. The log is written by the job's
  // writer thread, never on the calling thread or under the job's lock, so
  // `done` may run later on that thread. A push is never acknowledged before
  // its record is durable, so if the server dies the worker retries it and
  // nothing acknowledged is lost. Reads may see an update before its record
  // is durable (docs/durability.md). A retry of an applied push is
  // acknowledged with duplicate=true once its record is durable; a retry of a
  // parked one is parked too. A push with NaN or Inf is refused, or
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

  // Waits until every update applied so far is durable and the pushes it
  // completes are answered (their callbacks have run); returns the store's
  // error if it failed. Immediate without a store. Blocks on the disk: never
  // call it on a gRPC callback thread.
  absl::Status Flush();

  // Receives the reply of a Seed, or why it failed; called exactly once.
  using SeedCallback = ::ps::SeedCallback;
  // EXTERNAL models (ParameterService.Seed): sets the initial values of the
  // FROM_WORKER blocks this server holds, from worker 0's module, exactly
  // once. The first Seed must carry every such block (each once, float32,
  // finite); it is applied as a whole, logged like an update (answered once
  // its record is durable, possibly on the log's writer thread), and lets
  // the waiting pulls through. Later ones (retries, a replacement worker 0)
  // return duplicate=true, once the first is durable, and change nothing.
  // Errors (through `done`):
  // INVALID_ARGUMENT (worker_index not 0, a missing, unknown, repeated or
  // non-FROM_WORKER block, a wrong size, NaN or Inf), FAILED_PRECONDITION
  // (stale map; no FROM_WORKER tensors), the Close reason, UNAVAILABLE if
  // the store failed. A refused Seed changes nothing.
  void Seed(const v1::SeedRequest& request, SeedCallback done);
  // False while blocks of FROM_WORKER tensors wait for Seed: until then
  // pulls wait (CanRead) and ParameterManager refuses pushes. The state is
  // in the blocks (kUnseededBits), so it survives a restart with them.
  bool seeded() const;

  // Fails every waiting pull and parked push with `reason` and refuses later
  // requests; then waits until the update log is written and, if the store
  // is healthy and anything was logged since the last snapshot, writes a
  // snapshot (so a clean close leaves no log to replay), unless `snapshot`
  // is false (a server move replaces the stored state: the log is written,
  // no snapshot, then or at any later Close). Blocks on the disk: never call it
  // on a gRPC callback thread. Calling it again waits and does nothing more.
  void Close(const absl::Status& reason, bool snapshot = true);

  // What a server reports of a membership change in progress
  // (HeldAssignment): the proposal's version it froze for (0: none), its
  // frontier, and each leaving place's recorded clock here.
  struct MembershipReport {
    int64_t version = 0;
    int64_t frontier = 0;
    std::vector<int64_t> leaving_clocks;
  };
  // Elastic jobs (docs/consistency.md, "Membership changes"): takes the
  // coordinator's latest membership from `assignment`. A newer committed
  // history is applied (a BSP clock its change completes is applied and
  // logged, and the requests it lets through answered); a newer proposal
  // is applied (ClockTable::Freeze). Returns the proposal's report.
  // Thread-safe; does not block on the disk.
  MembershipReport ApplyMembership(const v1::Assignment& assignment);

  // Server moves (server/server_job_move.cc; docs/consistency.md, "Server
  // moves"). What a server reports of a move in progress: the change's
  // version it froze for (0: none) and its frontier.
  struct MoveReport {
    int64_t version = 0;
    int64_t frontier = 0;
  };
  // Takes the coordinator's change of the job's servers from `assignment`
  // (Assignment.map_change): freezes this server's frontier for a new one
  // (no push at or beyond it is taken: UNAVAILABLE, retry), raises it to
  // the agreed boundary once set, and ends the freeze when the assignment
  // lists no change (the move was abandoned). Thread-safe; does not block.
  MoveReport ApplyMapChange(const v1::Assignment& assignment);
  // The state of the units `request.keys` at the move's boundary, with
  // every place's clock, once every place's clock here is the boundary and
  // durable. Errors: UNAVAILABLE (not drained yet, or this server has not
  // taken that move or boundary yet: retry), INVALID_ARGUMENT (a key this
  // server does not hold), the Close reason. Thread-safe; copies under the
  // job's lock.
  absl::StatusOr<v1::FetchUnitsResponse> ExportUnits(
      const v1::FetchUnitsRequest& request) const;

  const std::string& job_id() const { return job_id_; }
  // The job's assignment as this server got it.
  const v1::Assignment& assignment() const { return assignment_; }
  // The slowest worker's clock.
  int64_t min_clock() const;
  // Every worker's clock, as "[c0 c1 ...]" (for logs).
  std::string ClocksString() const;
  // Rows held in all the job's sparse tables on this server (0 without
  // any), for logs. Thread-safe (takes the job's lock).
  int64_t SparseRowCount() const;
  // Every bucket of the job's sparse tables on this server as a snapshot
  // stores it (SparseTableSet::Snapshot: buckets ascending, rows in
  // server/sparse_bucket_codec.h's format), for an export
  // (server/row_export.h). Thread-safe (takes the job's lock).
  std::vector<StoredBlock> SparseSnapshot() const;

 private:
  ServerJob(const v1::Assignment& assignment, ShardStore* store,
            ServerMetrics* metrics, const ServerJobOptions& options,
            std::unique_ptr<Optimizer> optimizer, int64_t staleness);
  // Open's steps (server/server_job_open.cc). Build: the spec checked and
  // the job's tables made (dense, the sparse tier, sparse), empty; `store`
  // is null for a MEMORY job. Errors: INVALID_ARGUMENT naming the field.
  static absl::StatusOr<std::unique_ptr<ServerJob>> Build(
      const v1::Assignment& assignment, ShardStore* store,
      ServerMetrics* metrics, const ServerJobOptions& options);
  // A MEMORY job's start: `initial` restored if given, else the model file
  // of spec.init_from loaded if any.
  absl::Status StartInMemory(StoredJob* initial);
  // Starts the update log's writer on `store`, reporting to OnDurable.
  void StartLogWriter(ShardStore* store);
  // Reopens the job `store` held (its identity checked: FAILED_PRECONDITION
  // if the store holds it under another spec or shard map) and logs what
  // was reloaded.
  absl::Status Reload(StoredJob stored);
  // A first open (nothing stored): the initial values (spec.init_from's, if
  // any), the job's identity and the first snapshot written, and flushed.
  absl::Status StoreFirstSnapshot(ShardStore* store);
  // Loads a snapshot and replays the update log that follows it.
  absl::Status Restore(StoredJob stored);
  // Open's end for a server move: the store's copy of the job is replaced
  // by `initial` (server/server_job_move.cc).
  static absl::StatusOr<std::unique_ptr<ServerJob>> AdoptMoved(
      std::unique_ptr<ServerJob> job, ShardStore* store, StoredJob initial);
  // Every unit this server holds, as FetchUnits carries it, at the move
  // `request` names (its boundary reached): dense blocks, and every bucket
  // placed here, an empty one too (server/server_job_move.cc).
  struct MoveExport;
  MoveExport ExportAtBoundaryLocked(const v1::FetchUnitsRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's initial values from the model file of spec.init_from: the
  // dense blocks and the rows of the buckets this server holds (ids hashed
  // with this job's num_buckets), with fresh optimizer state
  // (server/server_job_init.cc). Errors: INVALID_ARGUMENT if the file does
  // not fit the job (CheckModelFitsJob), holds an id twice in a table or a
  // NaN or Inf; the file's read errors.
  absl::Status LoadInitialModel();
  // Applies one logged update through the path the live update took
  // (ParameterTable::Apply), and the clocks it recorded.
  absl::Status Replay(const std::string& bytes, int64_t sequence)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRequest(int64_t map_version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `cold`: the pull's cold rows, planned and read (SparseTableSet::Read).
  WireMessage BuildReply(const PullKeys& keys, const ReplyAllocator& allocate,
                         SparseColdReads* cold = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pull that may be read now (CanReadPullLocked): its reply into
  // `reply`, unless it reads rows from the sparse tier; then the plan of
  // those reads, for AnswerColdPull to make once the lock is released
  // (server/server_job_cold.cc; docs/sparse.md, "Threading").
  std::optional<SparseColdReads> ReplyOrPlanLocked(
      int64_t clock, bool final, const PullKeys& keys,
      const ReplyAllocator& allocate, absl::StatusOr<WireMessage>* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads `cold` from the tier without the lock, then builds the reply
  // under it (the rows moved in between read again there) and calls `done`.
  void AnswerColdPull(const PullKeys& keys, const ReplyAllocator& allocate,
                      SparseColdReads cold, const PullWireCallback& done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // CollectReady's answer to a pull it releases: into ready->pulls, or
  // ready->later when it reads cold rows.
  void ReleasePullLocked(WaitingPull& pull, ReadyCallbacks* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies `update` to the table at the schedule's rate for its clock, and
  // logs it (its bytes copied into the record only when the job persists).
  // Every update of the live path goes through here.
  void ApplyAndLogLocked(const TableUpdate& update, int worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BSP: applies and logs the clock the clock table just completed.
  void ApplyBspClockLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The pipelined step (server/server_job_pipeline.cc; docs/consistency.md,
  // "The pipelined step"). Takes an accepted BSP push of some of the
  // clock's blocks: the blocks this worker had not pushed yet are summed,
  // those every worker has now pushed are applied and logged (BSP_BLOCKS),
  // and the push is answered once its blocks are applied and durable.
  std::optional<absl::StatusOr<v1::PushResponse>> AcceptPartLocked(
      const PushView& request, PushCheck& check, bool apply, PushCallback& done,
      ReadyCallbacks* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CanRead, or in a pipelined job a read at min_clock + 1 of blocks that
  // are all applied for min_clock.
  bool CanReadPullLocked(int64_t clock, bool final, const PullKeys& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reply of a read CanReadPullLocked allows (BuildReply; for blocks
  // read ahead of their clock, the clocks they hold).
  WireMessage PullReplyLocked(int64_t clock, bool final, const PullKeys& keys,
                              const ReplyAllocator& allocate) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pipelined push parked by AcceptPartLocked: its blocks are applied and
  // the records that applied them durable.
  bool PartDurableLocked(const ParkedPush& push) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replay of a BSP_BLOCKS record (applied already): which blocks of the
  // unfinished clock it applied.
  void ReplayBlocksLocked(const TableUpdate& update, int64_t sequence)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets up block_clock_ for a pipelined job (Open).
  void StartBlockClockLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker's durable clock (0 for a place the log has not seen yet).
  int64_t DurableClockLocked(int worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Exports the sparse tables' counters that changed since the last call.
  void ExportSparseCountsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The memory tier's part of ExportSparseCountsLocked.
  void ExportTierCountsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the job's sparse tier when it has tables and a budget.
  absl::Status OpenTier(const ServerJobOptions& options);
  // OK, or (after a tier read or write failed) the job closed UNAVAILABLE:
  // its rows may be wrong, so it stops serving as after a store failure.
  absl::Status TierHealthLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a push's gradients, dense and sparse, before the lock.
  PushCheck CheckPush(const PushView& request) const;
  // Queues a snapshot of the whole state at the last logged record (its
  // time under the lock in ps_snapshot_lock_seconds).
  void SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The writer's report: records up to `sequence` are durable, or the store
  // failed (the job then refuses all requests).
  void OnDurable(int64_t sequence, const absl::Status& status);
  // True unless a value still waits for Seed; caches a true answer in
  // seeded_ (tables never become unseeded again).
  bool SeededLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Seed under the lock: the reply now, or nullopt if `done` was parked until
  // the seed's record is durable.
  std::optional<absl::StatusOr<v1::SeedResponse>> SeedLocked(
      const v1::SeedRequest& request, SeedCallback& done, ReadyCallbacks* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when a read at `clock` may be answered now: seeded, and the
  // consistency bound, or for a final read every worker's pushes below
  // `clock`.
  bool CanRead(int64_t clock, bool final) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the pulls the current min_clock lets through, and the pushes and
  // Seeds whose update is durable, into `ready` (all of them, failed, once
  // closed).
  void CollectReady(ReadyCallbacks* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The learning rate of the update of `clock` (the job's schedule), also
  // set as ps_learning_rate.
  float ScheduledRate(int64_t clock) const;
  // The factor the job's schedule applies at `clock` to the sparse tables'
  // own learning rates.
  float SparseRateFactor(int64_t clock) const;
  // Push under the lock: returns the reply now, or nullopt if `done` was
  // parked.
  std::optional<absl::StatusOr<v1::PushResponse>> PushLocked(
      const PushView& request, PushCheck& check, PushCallback& done,
      ReadyCallbacks* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PushLocked's part for a push that is new and valid: accumulates (BSP)
  // or applies it, logs, and parks `done` until durable.
  std::optional<absl::StatusOr<v1::PushResponse>> AcceptPushLocked(
      const PushView& request, PushCheck& check, bool apply, PushCallback& done,
      ReadyCallbacks* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const v1::Assignment assignment_;
  const std::string job_id_;
  ServerMetrics* const metrics_;
  const std::unique_ptr<Optimizer> optimizer_;
  const bool drop_non_finite_;  // The job's policy is NON_FINITE_DROP.

  // The job's parts (docs/architecture.md, "The server's job"). mu_ guards
  // all of them; none locks on its own. The table's set of keys and sizes
  // never changes after Open, so its lock-free checks run before mu_.
  mutable absl::Mutex mu_;
  // Values, optimizer state, BSP sums; set in Open, before any request.
  std::unique_ptr<ParameterTable> table_;
  // The sparse tables' cold rows under a memory budget (null without one);
  // declared before sparse_, which uses it, so that it closes after it.
  std::unique_ptr<SparseTier> tier_;
  std::string tier_temp_root_;  // A temporary directory to remove, if any.
  // Sparse tables' rows (docs/sparse.md); set in Open, empty without any.
  std::unique_ptr<SparseTableSet> sparse_;
  // Per table, the counters last exported to metrics.
  std::vector<SparseTableCounts> exported_counts_ ABSL_GUARDED_BY(mu_);
  std::vector<SparseTierCounts> exported_tier_ ABSL_GUARDED_BY(mu_);
  absl::Time disk_bytes_exported_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Worker clocks and the consistency bound.
  ClockTable clocks_ ABSL_GUARDED_BY(mu_);
  // A server move's units as ExportUnits answers them, taken at the first
  // FetchUnits of the move (the state at the boundary stays as it is until
  // the move ends) and dropped when it ends (server/server_job_move.cc).
  struct MoveExport {
    int64_t version = 0;
    int64_t boundary = 0;
    std::map<uint64_t, StoredBlock> units{};  // Blocks and buckets held here.
  };
  mutable std::optional<MoveExport> move_export_ ABSL_GUARDED_BY(mu_);
  // Elastic jobs: the membership history applied to clocks_.
  MembershipHistory committed_membership_ ABSL_GUARDED_BY(mu_);
  // Pulls, pushes and Seeds held back.
  WaitingRequests waiting_ ABSL_GUARDED_BY(mu_);
  // The pipelined step (ConsistencySpec.pipeline_parts): which blocks of
  // the current clock each worker pushed and which are applied; null
  // otherwise. Set in Open, before any request.
  std::unique_ptr<BlockClock> block_clock_ ABSL_GUARDED_BY(mu_);
  // The update log, snapshots and what is durable.
  DurabilityPipeline durability_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // Non-OK once closed or broken.
  // False once a Close declined the closing snapshot.
  bool closing_snapshot_ ABSL_GUARDED_BY(mu_) = true;
  // The seed's record (0: not seeded through this job's log).
  int64_t seed_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex close_mu_;  // Serialises Close.
  // Once true, stays true (SeededLocked); read without the lock by seeded().
  mutable std::atomic<bool> seeded_{false};
  // Buffers of pull replies, reused (two idle at most).
  const std::shared_ptr<WireBufferPool> reply_buffers_ =
      std::make_shared<WireBufferPool>(2);
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_JOB_H_

// The coordinator's state, and the one lock over it. JobManager holds the
// jobs (durable in the JobTable) and their places, and drives what spans jobs
// and nodes; each other concern has its own part, not thread-safe, used under
// JobManager's lock:
//   NodeRegistry      cluster members and their leases (node_registry.h)
//   JobWatchers       WatchJob's subscribers (job_watchers.h)
//   job_progress.h    progress aggregation and per-epoch records
//   JobTable          the job store (job_table.h), written only by
//   JobStoreWriter    its one writer thread (job_store_writer.h; thread-safe:
//                     changes are queued under the lock, written off it)
// Its methods are grouped by concern in files of their own:
//   job_manager.cc             jobs: submit, get, cancel, watch, progress,
//                              state changes
//   job_manager_membership.cc  registration, heartbeats, lease expiry
//   job_manager_scheduling.cc  starting pending jobs, recovering lost places
//   job_manager_model.cc       the trained model store
//   job_manager_retention.cc   ended jobs' deletion and listing pages
// Knows nothing of gRPC. Changes are persisted off the lock by the
// JobStoreWriter; a call that changes a job's state (submit, cancel, delete,
// a report that ends a job) has an ...Async form that answers once the
// change is durable, for the gRPC handlers, and a blocking form for the
// rest.
#ifndef PS_COORDINATOR_JOB_MANAGER_H_
#define PS_COORDINATOR_JOB_MANAGER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_retention.h"
#include "coordinator/job_store_writer.h"
#include "coordinator/job_table.h"
#include "coordinator/job_watchers.h"
#include "coordinator/node_registry.h"
#include "coordinator/request_validation.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/job_service.pb.h"

namespace ps {

struct MembershipTiming {
  // A node that has not heartbeaten for this long loses its lease.
  absl::Duration lease = absl::Seconds(5);
  // How often nodes are told to heartbeat.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // How often the servers and workers of a job whose servers are being
  // moved (psctl scale) are told to heartbeat until the move ends
  // (HeartbeatResponse.heartbeat_interval_ms): each step of the move
  // travels by heartbeat, and training pauses for the steps after the
  // first freeze. Default 25 ms; at most heartbeat_interval.
  absl::Duration move_heartbeat_interval = absl::Milliseconds(25);
  // How long a running job waits for a lost server to come back (on the same
  // address) or for a lost worker's place to be taken by a free worker before
  // it fails.
  absl::Duration recovery_grace = absl::Seconds(60);
};

// Thread-safe.
class JobManager {
 public:
  // Receives a job's status after every change; called with the manager's lock
  // held, so it must not call back into the manager.
  using Watcher = JobWatchers::Watcher;

  // Loads the table. Jobs that were RUNNING when the coordinator stopped keep
  // running: their servers and workers register again and are given back their
  // places (servers by address, workers by the assignment they report holding).
  // `table` and `metrics` must outlive the manager. `limits` bound what
  // Submit admits.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(
      JobTable* table, MembershipTiming timing, CoordinatorMetrics* metrics,
      JobLimits limits = {});

  // Receive the outcome of an ...Async call once its change is durable (or
  // failed to be stored: UNAVAILABLE, naming the store's error). They run on
  // the writer's thread, or on the caller's, without the manager's lock.
  using SubmitDone = std::function<void(absl::StatusOr<std::string>)>;
  using StatusDone = std::function<void(absl::StatusOr<v1::JobStatus>)>;
  using ProgressDone =
      std::function<void(absl::StatusOr<v1::ProgressResponse>)>;
  using DeleteDone = std::function<void(absl::Status)>;

  ~JobManager();

  // Validates and queues a job; `done` gets its id once its record is
  // durable (the job exists from then on: a failed write leaves no job).
  // Returns the checks' error, and then never calls `done`: INVALID_ARGUMENT
  // names the field; RESOURCE_EXHAUSTED when limits.max_jobs jobs are already
  // pending or running (or being submitted), or the model is larger than
  // limits.max_model_bytes. A non-empty `request_id` (ValidateId)
  // names the submit: a submit with the request id of an earlier one gets
  // that one's job (once durable), never a second job, across restarts,
  // while that job is kept; ALREADY_EXISTS if its spec differs.
  absl::Status SubmitAsync(v1::JobSpec spec, const std::string& request_id,
                           SubmitDone done);
  // SubmitAsync, waiting for the outcome. Not on a gRPC callback thread.
  absl::StatusOr<std::string> Submit(v1::JobSpec spec,
                                     const std::string& request_id = "");
  // NOT_FOUND for an unknown job. Every call taking a job id refuses a
  // malformed one (ValidateId) with INVALID_ARGUMENT.
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) const;
  std::vector<v1::JobStatus> List() const;
  // Cancels a pending or running job; `done` gets its status once the
  // cancellation is durable. Returns the checks' error (then never calls
  // `done`): NOT_FOUND; FAILED_PRECONDITION if it ended.
  absl::Status CancelAsync(const std::string& job_id, StatusDone done);
  // CancelAsync, waiting for the outcome. Not on a gRPC callback thread.
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id);

  // Calls `watcher` with the current status now and after every change until
  // Unwatch. Returns a token for Unwatch. NOT_FOUND for an unknown job.
  absl::StatusOr<int64_t> Watch(const std::string& job_id, Watcher watcher);
  // After it returns, the watcher is never called again.
  void Unwatch(int64_t token);

  // Membership. A server whose address is that of a running job's server, and a
  // worker that reports holding a place whose node is gone, get that place
  // back; a server that comes back to a place without the job's shards (it
  // does not list the job in `held` although it stored the job's shards
  // before) fails the job, saying so. `peer_host` is the host the request
  // came from ("" if unknown). Errors: INVALID_ARGUMENT for a bad role, a
  // server without an address, another malformed field
  // (ValidateRegisterRequest), or a server advertising a loopback address
  // from another host; ALREADY_EXISTS for a server address that a live server
  // with other storage holds.
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request, const std::string& peer_host = "");
  // Renews the lease, records the jobs a server says it holds, and returns
  // the node's assignments. NOT_FOUND: re-register.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request);
  // Heartbeat of a node that holds nothing.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& node_id);
  // Records a worker's progress; finishes or fails the job as reports say.
  // INVALID_ARGUMENT for a malformed report (ValidateProgressReport);
  // NOT_FOUND for an unknown job; the reply says stop once the job is not
  // running.
  // Progress alone is answered at once and stored coalesced (the writer
  // writes each job's latest status); a report that ends the job is
  // answered once the end is durable.
  absl::Status ReportProgressAsync(const v1::ProgressReport& report,
                                   ProgressDone done);
  // ReportProgressAsync, waiting for the outcome.
  absl::StatusOr<v1::ProgressResponse> ReportProgress(
      const v1::ProgressReport& report);

  // True once a write of the job table failed: memory and disk may differ
  // until a restart (the coordinator reports NOT_SERVING).
  bool store_failed() const;
  // Waits until every change made so far is durable (or failed). For tests
  // and shutdown; not on a gRPC callback thread.
  void FlushStore();

  // Expires leases, gives the places of lost workers to free workers, fails
  // jobs whose lost nodes were not back within the recovery grace, and starts
  // pending jobs on free nodes. Call periodically.
  void Tick(absl::Time now);

  // Stores the trained model worker 0 uploads at the end of a job (durably,
  // in the job table, outside the manager's lock). Errors: NOT_FOUND for an
  // unknown job; PERMISSION_DENIED unless the caller is the job's worker 0;
  // FAILED_PRECONDITION unless the job is RUNNING; INVALID_ARGUMENT if the
  // tensors do not match the job's model (names, shapes, data sizes); the
  // table's error if the write fails.
  absl::Status UploadModel(const v1::UploadModelRequest& request);
  // The trained model of a SUCCEEDED job. NOT_FOUND, saying why, for an
  // unknown job, one that has not succeeded, or one without a stored model.
  absl::StatusOr<v1::TrainedModel> ExportModel(const std::string& job_id);

  // Ended jobs' records (job_manager_retention.cc).
  //
  // Deletes an ended job's record and trained model from the table, then
  // from memory (it is listed until its deletion is durable); the servers
  // delete its shards when they next heartbeat (EndedJobs). `done` gets the
  // outcome. Returns the checks' error (then never calls `done`): NOT_FOUND
  // for an unknown job; FAILED_PRECONDITION for a pending or running one.
  absl::Status DeleteAsync(const std::string& job_id, DeleteDone done);
  // DeleteAsync, waiting for the outcome (the table's error if the delete
  // fails). Not on a gRPC callback thread.
  absl::Status Delete(const std::string& job_id);
  // Deletes the ended jobs `retention` no longer keeps at `now`, in batches
  // through the writer, and waits (without the manager's lock) until they
  // are gone; returns how many. Logs the table's errors (the job is then
  // kept and tried again). Call from one thread (the coordinator's ticker),
  // not a gRPC callback thread.
  int ApplyRetention(absl::Time now, const JobRetention& retention);
  // Up to `page_size` jobs (0: kDefaultListPageSize; capped at
  // kMaxListPageSize) after `page_token` (a previous page's
  // next_page_token; empty: from the first), in id order. INVALID_ARGUMENT for
  // a negative page_size or a malformed page_token.
  absl::StatusOr<JobPage> ListPage(int page_size,
                                   const std::string& page_token) const;
  // Of the job ids a server still stores (the first kMaxStoredJobIds), those
  // whose shards it may delete: ended jobs (but not a SUCCEEDED job with
  // sparse tables, whose rows an export reads there until it is deleted)
  // and jobs this coordinator does not know (deleted or expired). Malformed
  // ids are skipped.
  std::vector<std::string> EndedJobs(
      const std::vector<std::string>& stored_job_ids) const;

  // Starts moving a RUNNING job to `num_servers` servers
  // (job_manager_scale.cc; docs/operations.md, "Scaling a job's servers"):
  // the first servers stay, free servers are added (durable ones unless the
  // job's durability is MEMORY) or the last ones leave; the move then runs
  // at a clock boundary, driven by heartbeats (JobStatus.map_change until
  // it ends, then map_moves). Returns the job's status with the change (or
  // unchanged when it already has num_servers). Errors: INVALID_ARGUMENT
  // (a malformed id, num_servers < 1, more servers than the job's units),
  // NOT_FOUND, FAILED_PRECONDITION (not RUNNING; elastic; sparse tables; a
  // move in progress; a server place vacant), RESOURCE_EXHAUSTED (too few
  // free servers). `done` gets the status once the move's proposal (or the
  // unchanged record) is durable, or UNAVAILABLE if that write failed.
  // Returns the checks' error (then never calls `done`).
  absl::Status ScaleAsync(const std::string& job_id, int num_servers,
                          StatusDone done);
  // ScaleAsync, waiting for the outcome. Not on a gRPC callback thread.
  absl::StatusOr<v1::JobStatus> Scale(const std::string& job_id,
                                      int num_servers);

  // Every registered node (job_manager_nodes.cc): servers first, each role in
  // node id order; its role, address, job and place, and its last heartbeat.
  std::vector<v1::NodeInfo> ListNodes() const;

 private:
  // A server or worker place in a running job.
  struct Slot {
    std::string node_id;  // Empty while vacant.
    absl::Time vacant_since = absl::InfiniteFuture();
    // The node that held the place last and its address (for messages).
    std::string last_node_id;
    std::string last_address;
    // Servers: the holder said (in a heartbeat) that it stores the job's
    // shards, so a server coming back without them has lost them.
    bool has_shards = false;
    // Workers of an elastic job: the place left the job (or is leaving by
    // the change in progress); it is never filled again.
    bool removed = false;
  };
  struct Job {
    v1::JobStatus status;  // status.shard_map() places the blocks.
    // ModelDigest of the spec's model (WorkerFits); set by Submit and Load.
    std::string model_digest;
    std::vector<Slot> servers;
    std::vector<Slot> workers;
    std::vector<v1::ProgressReport> reports;  // Latest per worker.
    // The SubmitJob request id that made it ("" if none).
    std::string request_id;
    // Its deletion is queued (DeleteAsync, ApplyRetention).
    bool deleting = false;
    // Elastic jobs: the servers' reports on the membership change in
    // progress, by server index (job_manager_elastic.cc).
    std::map<int, v1::HeldAssignment> membership_acks;
    // Elastic jobs: the joining places of the change in progress whose
    // workers said (in a heartbeat) that they are ready to train it (data
    // loaded). Servers are told of the change only once all are.
    std::set<int> joiners_ready;
    // A server move in progress (job_manager_scale.cc): the frontiers the
    // current map's servers reported, and the new map's servers that
    // reported their units staged, by server index.
    std::map<int, int64_t> map_frontiers;
    std::set<int> map_staged;
    // The current map's servers told to heartbeat fast for the move in
    // progress (MoveHeartbeatInterval); they are told to freeze only once
    // all are, so that they freeze within one short interval of each other.
    std::set<int> map_alerted;
  };
  // A submitted job whose record is not durable yet.
  struct Submitting {
    v1::JobStatus status;
    std::string request_id;           // "" if none.
    std::vector<SubmitDone> waiting;  // The submit and its retries.
  };

  JobManager(JobTable* table, MembershipTiming timing,
             CoordinatorMetrics* metrics, JobLimits limits);

  // Calls `start` with a callback and waits until that callback gets the
  // result; an error `start` returns (then it never calls back) is the
  // result.
  template <typename Result, typename Start>
  static Result AwaitResult(Start start) {
    absl::Notification notified;
    std::optional<Result> result;
    absl::Status started = start([&](Result r) {
      result.emplace(std::move(r));
      notified.Notify();
    });
    if (!started.ok()) return started;
    notified.WaitForNotification();
    return *std::move(result);
  }

  absl::Status Load();
  // The job a submit with `request_id` already made or is making, if any:
  // true, and either `answer` set (that job's id, or ALREADY_EXISTS when
  // `spec` differs from that job's) or `done` queued for the earlier
  // submit's outcome. False if there is none.
  bool JoinEarlierSubmit(const std::string& request_id, const v1::JobSpec& spec,
                         SubmitDone& done,
                         std::optional<absl::StatusOr<std::string>>& answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands out the job's id and queues its record (CheckJobCount first);
  // Submitted answers `done`.
  absl::Status QueueSubmit(v1::JobStatus status, const std::string& request_id,
                           SubmitDone done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The writer's answer to Submit's write of job `id`.
  void Submitted(const std::string& id, const absl::Status& written);
  // The ended jobs `retention` no longer keeps at `now`, not yet being
  // deleted.
  std::vector<std::string> Expired(absl::Time now,
                                   const JobRetention& retention) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The writer's answer to the deletion of `job_id`.
  void Deleted(const std::string& job_id, const absl::Status& written);
  // Checks a registering server's address (NodeRegistry::ServerToReplace)
  // and removes the node it replaces, vacating that node's places.
  absl::Status AdmitServer(const v1::RegisterRequest& request,
                           const std::string& peer_host, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a worker registering for one job (RegisterRequest.job_id): the
  // job exists (NOT_FOUND), has not ended (FAILED_PRECONDITION) and its
  // model fits the worker's (INVALID_ARGUMENT naming model_digest and
  // listing the job's tensors as "name[d0,d1]").
  absl::Status AdmitWorkerForJob(const v1::RegisterRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a registered server back the places at its address in running jobs,
  // or fails a job whose shards it came back without.
  void ReturnServerPlaces(const std::string& node_id,
                          const v1::RegisterRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds job.status.vacant from the slots; true if it changed.
  bool PublishVacancies(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets a pending job's message; persists and publishes only a change.
  void SetPendingMessage(Job& job, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job `job_id`; NOT_FOUND naming `field` (the request's field that
  // gave the id) when there is none.
  absl::StatusOr<Job*> FindJobLocked(const std::string& job_id,
                                     absl::string_view field = "job_id")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<const Job*> FindJobLocked(
      const std::string& job_id, absl::string_view field = "job_id") const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when limits_.max_jobs jobs are pending, running or
  // being submitted.
  absl::Status CheckJobCount() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the job's record for the writer, publishes to watchers and
  // updates gauges. `durable` (may be null) gets the write's outcome.
  void Changed(Job& job, JobStoreWriter::Done durable = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes to watchers and updates gauges, without persisting.
  void Publish(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a RUNNING job's progress report from its worker; true if every
  // worker has now finished.
  bool RecordProgress(Job& job, const v1::ProgressReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a job to a terminal state and frees its nodes. `durable` (may be
  // null) gets the write's outcome.
  void Finish(Job& job, v1::JobState state, const std::string& message,
              JobStoreWriter::Done durable = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Schedule(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a pending job waits for among the registered nodes ("2 servers
  // with a data directory ..."); empty when enough are registered.
  std::vector<std::string> MissingNodes(const Job& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a pending job these free nodes' places, plans its shard map and
  // makes it RUNNING (or FAILED if no map can be planned).
  void StartJob(Job& job, const std::vector<std::string>& servers,
                const std::vector<std::string>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills vacant worker places with free workers; fails jobs whose places
  // stayed vacant longer than the grace.
  void Recover(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Elastic workers (job_manager_elastic.cc; docs/consistency.md,
  // "Membership changes").
  //
  // Records the starting membership (version 0) of an elastic job.
  void StartMembership(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds a loaded elastic job's places from its membership history.
  void LoadMembership(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drives an elastic job's membership: commits the change in progress once
  // every server reported its frontier; else proposes to drop the worker
  // places vacant longer than the grace (while min_workers remain), or to
  // add a free worker (below max_workers, no place vacant).
  void RecoverElastic(Job& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker places of an elastic job vacant longer than the grace that
  // can be dropped (not place 0, and min_workers remain without them);
  // empty when they cannot all be (the job then fails for them).
  std::vector<int> DroppablePlaces(const Job& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a change: the leaving places are removed (fenced), the joining
  // ones are new places already attached to their nodes.
  void ProposeMembership(Job& job, const std::vector<int>& leaving,
                         const std::vector<std::string>& joining_nodes,
                         const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Withdraws a change no server has been told of (a joining worker was
  // lost before it was ready): its joining places are closed, its leaving
  // ones wait for the next change.
  void AbandonMembership(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits the change in progress at the largest frontier the servers
  // reported.
  void CommitMembership(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the report of the change in progress from `role`'s place
  // `index`: a server's frontier, or a joining worker's readiness.
  void RecordMembershipAck(Job& job, v1::NodeRole role, int index,
                           const v1::HeldAssignment& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reports of the places that have not left (for an elastic job; all
  // of them otherwise), place 0's first.
  static std::vector<v1::ProgressReport> MemberReports(const Job& job);
  // Server moves (job_manager_scale.cc). Why `job` cannot move to
  // `num_servers` servers now (OK if it can).
  absl::Status CheckScalable(const Job& job, int num_servers) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The heartbeat interval for a node of `job` in `role` at `index`
  // (HeartbeatResponse.heartbeat_interval_ms): timing_.move_heartbeat_interval
  // while the job's servers are being moved, else 0 (the registered
  // interval). A server of the current map is recorded as alerted.
  int64_t MoveHeartbeatInterval(Job& job, v1::NodeRole role, int index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether server `index` of `job` is told of the move in progress
  // (Assignment.map_change): a server being added at once, a server of the
  // current map once every server of the current map is alerted.
  static bool MapChangeAnnounced(const Job& job, int index);
  // Records a server's report on the move in progress, and advances it.
  void RecordMapChangeAck(Job& job, int index, const v1::HeldAssignment& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the boundary once every current server reported its frontier,
  // commits once every new server staged, abandons when a server is lost.
  void AdvanceMapChange(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the move in progress without a change of map.
  void AbandonMapChange(Job& job, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the decision; once durable, FinishMapChange.
  void CommitMapChange(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts the new map in effect and releases the servers that left.
  void FinishMapChange(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At load: finishes a committed move, abandons another.
  void LoadMapChange(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lost server's place rebuilt from shared storage
  // (job_manager_rebuild.cc). Records where server `index` of `job` keeps
  // its state (JobStatus.server_storage).
  void RecordServerStorage(Job& job, int index, const NodeRecord& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives server place `index`, vacant past the grace, to a free server
  // that rebuilds it from the lost server's data directory on shared
  // storage; true if it did. Else `why_not` says why, when the lost server
  // was on shared storage (empty when it was not).
  bool RebuildServer(Job& job, int index, absl::Time now, std::string* why_not)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a lost server place is rebuilt (job_manager_rebuild.cc).
  struct RebuildTarget {
    std::string node_id;
    std::string address;
    bool survivor = false;  // A surviving server of the job hosts it.
  };
  // A free server with the lost server's shared root if one is registered,
  // else a surviving server of the job (ChooseSurvivor); false with
  // `why_not` when there is neither.
  bool ChooseRebuildTarget(const Job& job, int index,
                           const v1::ServerStorage& lost, absl::Time now,
                           RebuildTarget* target, std::string* why_not) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives server place `index` to `node_id`, which hosts it beside its own
  // (its NodeRecord keeps its own place).
  void AttachHosted(Job& job, int index, const std::string& node_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Vacates the places other than `own_index` that `node_id` hosted.
  void VacateHostedPlaces(Job& job, const std::string& node_id, int own_index,
                          absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds to a heartbeat's answer the assignments of the places `node`
  // hosts beside its own (Assignment.hosted).
  void AddHostedAssignments(const Job& job, const NodeRecord& node,
                            const std::string& node_id,
                            v1::HeartbeatResponse* response) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs that a server registering again lost its place to a rebuild.
  void NoteRebuiltAway(const NodeRecord& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives `node_id` the place `index` of `role` in `job`.
  void Attach(Job& job, v1::NodeRole role, int index,
              const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Which nodes may take a place: of `role`; with `durable_only`, only
  // servers with a data directory; with `fits`, only workers that may train
  // that job (WorkerFits).
  static NodeRegistry::Filter PlaceFilter(v1::NodeRole role,
                                          bool durable_only = false,
                                          const Job* fits = nullptr);
  // True if worker `node` may take a place of `job`: a worker with a model
  // digest (a Python worker) only jobs whose model has that digest, one
  // without (ps-worker) only built-in models, and a worker started for one
  // job only that job.
  static bool WorkerFits(const NodeRecord& node, const Job& job);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The assignment of `role`'s place `index`. Servers get an elastic job's
  // change in progress only once its joining workers are ready
  // (JoinersReady).
  v1::Assignment AssignmentOf(const Job& job, int index,
                              v1::NodeRole role = v1::WORKER) const;
  // True when every joining place of the change in progress is ready.
  static bool JoinersReady(const Job& job);

  JobTable* const table_;
  const MembershipTiming timing_;
  CoordinatorMetrics* const metrics_;
  const JobLimits limits_;

  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  NodeRegistry nodes_ ABSL_GUARDED_BY(mu_);
  JobWatchers watchers_ ABSL_GUARDED_BY(mu_);
  // Jobs submitted whose records are not durable yet, by id.
  std::map<std::string, Submitting> submitting_ ABSL_GUARDED_BY(mu_);
  // SubmitJob request ids -> the job each made (or is making).
  std::map<std::string, std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  // The number the next submitted job gets (JobTable::JobId).
  int64_t next_job_number_ ABSL_GUARDED_BY(mu_) = 1;

  // Declared last: destroyed (drained) first, while what its callbacks use
  // is still there.
  std::unique_ptr<JobStoreWriter> writer_;
};

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(v1::JobState state);

}  // namespace ps

#endif  // PS_COORDINATOR_JOB_MANAGER_H_

// The jobs a parameter server holds, kept in step with the coordinator's
// assignments, and the dispatch of Pull and Push to them. Knows nothing of
// gRPC.
#ifndef PS_SERVER_PARAMETER_MANAGER_H_
#define PS_SERVER_PARAMETER_MANAGER_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ps/v1/cluster.pb.h"
#include "server/hosted_places.h"
#include "server/job_deleter.h"
#include "server/rebuild_import.h"
#include "server/row_export.h"
#include "server/server_job.h"
#include "server/shard_store.h"
#include "server/unit_mover.h"

namespace ps {

// Most stored job ids one registration or heartbeat reports
// (HeartbeatRequest.held; the coordinator's kMaxHeldAssignments allows more).
inline constexpr size_t kMaxReportedStoredJobs = 1000;

// Thread-safe.
class ParameterManager {
 public:
  // `store` and `metrics` must outlive the manager; `job_options` apply to
  // every job it opens.
  ParameterManager(ShardStore* store, ServerMetrics* metrics,
                   ServerJobOptions job_options = {});
  ~ParameterManager();

  // Makes the loaded jobs equal to `assignments`: opens new ones (reloading any
  // stored state) and unloads jobs no longer assigned; the same for the
  // places hosted here (Assignment.hosted, server/hosted_places.h). Returns
  // the errors of jobs that could not be opened (they stay unloaded and are
  // retried next time).
  std::vector<absl::Status> SyncAssignments(
      const std::vector<v1::Assignment>& assignments);

  // Dispatches to the job: to the place the request names if this server
  // hosts it (server/hosted_places.h), else to the server's own place.
  // INVALID_ARGUMENT for a malformed job id (ValidateId); NOT_FOUND if this
  // server does not hold the job.
  void Pull(const v1::PullRequest& request, ServerJob::PullCallback done);
  // A pull whose reply is the serialized PullResponse (ServerJob::PullWire),
  // written where `allocate` says if it is set.
  void PullWire(const v1::PullRequest& request,
                ServerJob::PullWireCallback done,
                ReplyAllocator allocate = nullptr);
  void Push(const v1::PushRequest& request, ServerJob::PushCallback done);
  // A push whose gradient bytes are views (ServerJob::Push: read during the
  // call only). Refused with FAILED_PRECONDITION while the job waits for
  // worker 0's Seed (ServerJob::seeded).
  void Push(const PushView& request, ServerJob::PushCallback done);
  // An EXTERNAL model's initial values from worker 0 (ServerJob::Seed).
  void Seed(const v1::SeedRequest& request, ServerJob::SeedCallback done);

  // A page of the job's sparse rows on this server (RowExporter::Read): a
  // served job's current rows, else a stored job's. `done` may run on the
  // exporter's thread.
  void ReadRows(const v1::ReadRowsRequest& request, RowExporter::Done done);

  // Ids of jobs with state in the store, served or not (sent with each
  // registration and heartbeat: the coordinator learns which shards this
  // server holds and answers which jobs ended), the newest
  // kMaxReportedStoredJobs (ids grow). The store's error if it cannot list.
  absl::StatusOr<std::vector<std::string>> StoredJobs() const;
  // Elastic jobs with a membership change in progress: what this server
  // reports of it (ServerJob::MembershipReport) in its heartbeats, one entry
  // per job (HeldAssignment's membership fields). Thread-safe.
  std::vector<v1::HeldAssignment> MembershipReports() const;
  // Deletes, off the calling thread, the stored state of the jobs the
  // coordinator says ended (HeartbeatResponse.ended_job_ids); a job loaded
  // now, or being exported, is left alone.
  void DeleteEndedJobs(const std::vector<std::string>& job_ids);

  // Server moves (docs/durability.md, "A server move"; these are in
  // server/parameter_manager_move.cc). How units are fetched from another
  // server of a job (ParameterServer sets it; without it a move waits).
  void SetRemoteFetch(UnitMover::RemoteFetch fetch);
  // How a lost server's data directory is opened when a place is rebuilt
  // here from it (server/rebuild_import.h; ParameterServer sets it; without
  // it such a place is refused with UNAVAILABLE).
  void SetLostStoreOpener(LostStoreOpener open);
  // Another server's copy of units of a job this server serves
  // (ServerJob::ExportUnits); NOT_FOUND if it does not serve the job.
  absl::StatusOr<v1::FetchUnitsResponse> FetchUnits(
      const v1::FetchUnitsRequest& request) const;
  // Jobs with a move in progress: what this server reports of it in its
  // heartbeats (HeldAssignment's map_* fields), one entry per job.
  std::vector<v1::HeldAssignment> MoveReports() const;

  // Unloads every job, answering the requests it holds (pulls waiting for
  // their clock, pushes waiting for the others' or for durability) with
  // UNAVAILABLE kStopping, as every request after; stops deleting (a
  // deletion in progress completes first). Workers retry UNAVAILABLE, so a
  // server stopped cleanly (SIGTERM) and started again fails no job.
  void Shutdown();
  // The message of the UNAVAILABLE of a stopping server.
  static constexpr char kStopping[] =
      "parameter server stopping (it may be restarting; retry)";

 private:
  absl::StatusOr<std::shared_ptr<ServerJob>> Find(
      const std::string& job_id) const;
  // The hosted place `place` of `job_id` if this server hosts it, else
  // Find(job_id); UNAVAILABLE (retry) for a request under this server's map
  // for another place than its own that is not hosted yet (its import
  // runs). server/parameter_manager_hosted.cc.
  absl::StatusOr<std::shared_ptr<ServerJob>> FindPlace(
      const std::string& job_id, std::optional<int32_t> place,
      int64_t map_version) const;
  // SyncAssignments for one of the server's own places (`a` not hosted):
  // applies a membership change or a move in progress to the job held under
  // `a`'s shard map, or closes the job held under another map and opens it
  // under `a`'s, or opens a job not held. The job's open error, naming it;
  // it stays unloaded.
  absl::Status SyncJob(const v1::Assignment& a);
  // Closes and unloads the jobs not in `wanted` (a move took them away, or
  // they ended: UnloadReasonLocked).
  void UnloadUnassigned(const std::set<std::string>& wanted);
  // Opens, reopens under a new map, or unloads the places hosted here to
  // match `hosted` (assignments with `hosted` set); appends open errors.
  void SyncHosted(const std::vector<const v1::Assignment*>& hosted,
                  std::vector<absl::Status>* errors);
  // Imports `a`'s place into `store` if it is rebuilt here from a lost
  // server's directory (ImportRebuiltPlace, with the SetLostStoreOpener
  // opener); returns `a` without its rebuild, to open the place by. The
  // import's errors.
  absl::StatusOr<v1::Assignment> ImportIfRebuilt(const v1::Assignment& a,
                                                 ShardStore* store);
  // ServerJob::Open of `a` (without a rebuild) on `store`; where the store
  // holds the job under a map that differs only in a rebuilt place's
  // address, keeps its state under the new addresses and opens it again
  // (KeepStateUnderNewAddresses). The open's errors.
  absl::StatusOr<std::unique_ptr<ServerJob>> OpenStored(const v1::Assignment& a,
                                                        ShardStore* store);
  // Closes every hosted place (Shutdown).
  void CloseHosted(const absl::Status& reason);

  ShardStore* const store_;
  ServerMetrics* const metrics_;
  const ServerJobOptions job_options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ServerJob>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Shutdown has begun.
  // Per job, the membership report of its change in progress.
  std::map<std::string, v1::HeldAssignment> membership_reports_
      ABSL_GUARDED_BY(mu_);
  // Records (or, for version 0, drops) a job's membership report.
  void RecordMembershipLocked(const std::string& job_id,
                              const ServerJob::MembershipReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves: the report of each job's move in progress; the jobs this server
  // leaves by the move in progress (their new map's version); the jobs
  // that left it, with that version (requests for them are refused as of
  // a stale map, so that workers fetch the new one).
  std::map<std::string, ServerJob::MoveReport> move_reports_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> leaving_ ABSL_GUARDED_BY(mu_);
  LostStoreOpener open_lost_ ABSL_GUARDED_BY(mu_);
  // Places hosted here, by (job id, place), and their stores (kept while
  // the manager lives: a closing job may still write through one).
  std::map<std::pair<std::string, int>, std::shared_ptr<ServerJob>> hosted_
      ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, std::unique_ptr<HostedPlaceStore>>
      hosted_stores_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> moved_away_ ABSL_GUARDED_BY(mu_);
  // Takes a move in progress of `a` (its report, whether this server leaves
  // the job by it); true when this server is being added by it (it has
  // nothing to serve under the current map).
  bool NoteMoveLocked(const v1::Assignment& a)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `job`'s report of `a`'s move (ServerJob::ApplyMapChange).
  void RecordMoveLocked(const std::string& job_id, ServerJob::MoveReport report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The refusal of a request for a job that moved off this server.
  static absl::Status MovedAway(const std::string& job_id, int64_t version);
  // The close reason of a job reopened under shard map `version`: a
  // map_version refusal with that version as its detail.
  static absl::Status MapChanged(const std::string& job_id, int64_t version);
  // Opens `a`'s job: from the units staged for its map version if any (a
  // move just committed), else as ServerJob::Open does.
  absl::StatusOr<std::unique_ptr<ServerJob>> OpenJob(const v1::Assignment& a);
  // Why a job unloaded now stops here (a move took it away, or it ended);
  // records a move away.
  absl::Status UnloadReasonLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StoredJobDeleter deleter_;
  RowExporter exporter_;
  // Declared last: its thread stops first, while the jobs are there.
  UnitMover mover_;
};

}  // namespace ps

#endif  // PS_SERVER_PARAMETER_MANAGER_H_

// The receiving side of a server move (docs/durability.md, "A server
// move"): for each job whose change of servers (Assignment.map_change) has
// its boundary set and whose new map gives this server units, copies those
// units' state at the boundary from their owners under the current map
// (ServerJob::ExportUnits, here or over ParameterService.FetchUnits), and
// stores it durably (synced) under a staging id of its own, apart from the
// job's current state, before reporting it staged. The coordinator commits
// the new map only once every server of it has staged; the server then
// opens the job from the staged copy (ServerJob::Open with `initial`) and
// the copy is deleted on the mover's thread once the job serves (Adopted).
// A move abandoned (no longer listed) has its copy deleted.
// Knows nothing of gRPC: the fetch from another server is a function given.
#ifndef PS_SERVER_UNIT_MOVER_H_
#define PS_SERVER_UNIT_MOVER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/parameter.pb.h"
#include "server/shard_store.h"

namespace ps {

// Thread-safe. Copies run on the mover's own thread.
class UnitMover {
 public:
  // Exports units of a job this server serves (ServerJob::ExportUnits).
  using LocalExport = std::function<absl::StatusOr<v1::FetchUnitsResponse>(
      const v1::FetchUnitsRequest&)>;
  // Fetches units from the server at `address` (FetchUnits); may block.
  using RemoteFetch = std::function<absl::StatusOr<v1::FetchUnitsResponse>(
      const std::string& address, const v1::FetchUnitsRequest&)>;

  // Most values one FetchUnits asks for (units are added whole, at least
  // one): 4 Mi floats, about 16 MiB of values (32 with optimizer state).
  static constexpr int64_t kMaxFetchElems = int64_t{4} << 20;

  // `store` (may be null: copies are kept in memory only) must outlive the
  // mover. Starts the thread.
  UnitMover(ShardStore* store, LocalExport local);
  // Stop().
  ~UnitMover();
  UnitMover(const UnitMover&) = delete;
  UnitMover& operator=(const UnitMover&) = delete;

  // How units are fetched from other servers (default: refused with
  // UNAVAILABLE, so a move waits).
  void SetRemoteFetch(RemoteFetch fetch);
  // Takes the moves of this server's `assignments`: starts copying for each
  // new one whose boundary is set and whose new map gives this server
  // units; forgets moves no longer listed, and deletes their staged
  // copies (memory and store) unless an assignment's map has that version.
  void Sync(const std::vector<v1::Assignment>& assignments);
  // The new map's version whose units this server holds staged for
  // `job_id` (0: none), for heartbeats (HeldAssignment.map_staged_version).
  int64_t StagedVersion(const std::string& job_id) const;
  // The staged state of `job_id` for map `version` (from memory, else from
  // the store, e.g. after a restart); nullopt if there is none. The store's
  // errors other than NOT_FOUND. `from_store` (if set): whether it was read
  // from the store.
  absl::StatusOr<std::optional<StoredJob>> Staged(const std::string& job_id,
                                                  int64_t version,
                                                  bool* from_store = nullptr);
  // The job was opened from the staged copy of `version` and its own state
  // written (ServerJob::Open with `initial`): forgets the copy at once and
  // deletes it from the store on the mover's thread (ShardStore::DropJob),
  // not on the caller's, so that the job serves without waiting for it.
  void Adopted(const std::string& job_id, int64_t version);
  // Ends the thread (a copy in progress stops at its next retry).
  void Stop();

  // The store id of a staged copy, and whether an id is one ('~' is in no
  // job id).
  static std::string StagedId(const std::string& job_id, int64_t version);
  static bool IsStagedId(const std::string& id);
  // The job id of a staged id; any other id as it is.
  static std::string JobOfStagedId(const std::string& id);

 private:
  struct Move {
    v1::Assignment assignment;
    int64_t version = 0;
    bool running = false;
    bool staged = false;
    std::optional<StoredJob> state;  // The staged units.
  };

  void Run();
  // Copies the units of `assignment`'s new map that this server owns.
  // CANCELLED if the move stops being current meanwhile.
  absl::StatusOr<StoredJob> Copy(const v1::Assignment& assignment);
  // One FetchUnits, retried while the owner is not drained (UNAVAILABLE,
  // or any other error: logged) until the move is no longer current.
  absl::StatusOr<v1::FetchUnitsResponse> FetchRetrying(
      const v1::Assignment& assignment, int owner,
      const v1::FetchUnitsRequest& request);
  // Stores `state` durably under its staging id.
  absl::Status Persist(const std::string& job_id, int64_t version,
                       const StoredJob& state);
  bool Current(const std::string& job_id, int64_t version) const;

  // Deletes the staged copies Adopted queued, in their order.
  void DeleteAdopted();

  ShardStore* const store_;
  const LocalExport local_;
  mutable absl::Mutex mu_;
  RemoteFetch remote_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Move> moves_ ABSL_GUARDED_BY(mu_);
  // Staged ids to delete (Adopted).
  std::vector<std::string> deletions_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_SERVER_UNIT_MOVER_H_

// ParameterManager: server moves (docs/durability.md, "A server move").
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_details.h"
#include "common/status_macros.h"
#include "server/parameter_manager.h"
#include "server/rebuild_import.h"

namespace ps {

void ParameterManager::SetRemoteFetch(UnitMover::RemoteFetch fetch) {
  mover_.SetRemoteFetch(std::move(fetch));
}

void ParameterManager::SetLostStoreOpener(LostStoreOpener open) {
  absl::MutexLock lock(&mu_);
  open_lost_ = std::move(open);
}

absl::StatusOr<v1::FetchUnitsResponse> ParameterManager::FetchUnits(
    const v1::FetchUnitsRequest& request) const {
  auto job = Find(request.job_id());
  if (!job.ok()) return job.status();
  return (*job)->ExportUnits(request);
}

std::vector<v1::HeldAssignment> ParameterManager::MoveReports() const {
  std::map<std::string, v1::HeldAssignment> reports;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, report] : move_reports_) {
      v1::HeldAssignment& held = reports[id];
      held.set_job_id(id);
      held.set_map_change_version(report.version);
      held.set_map_frontier_clock(report.frontier);
    }
    for (const auto& [id, version] : leaving_) {
      // Listed so that the coordinator reads its frontier even before
      // anything else is reported.
      if (!reports.contains(id)) reports[id].set_job_id(id);
    }
  }
  std::vector<v1::HeldAssignment> held;
  for (auto& [id, report] : reports) {
    report.set_map_staged_version(mover_.StagedVersion(id));
    held.push_back(std::move(report));
  }
  return held;
}

void ParameterManager::RecordMoveLocked(const std::string& job_id,
                                        ServerJob::MoveReport report) {
  if (report.version == 0) {
    move_reports_.erase(job_id);
  } else {
    move_reports_[job_id] = report;
  }
}

bool ParameterManager::NoteMoveLocked(const v1::Assignment& a) {
  const v1::ShardMapChange& change = a.map_change();
  if (change.version() <= a.shard_map().version()) {
    leaving_.erase(a.job_id());
    return false;
  }
  if (a.index() >= change.shard_map().servers_size()) {
    leaving_[a.job_id()] = change.version();
  } else {
    leaving_.erase(a.job_id());
  }
  // A server being added: its staging is reported (MoveReports) from the
  // mover; it serves the job once the new map is in effect.
  if (a.index() >= a.shard_map().servers_size()) {
    move_reports_[a.job_id()] = {};
    moved_away_.erase(a.job_id());  // Added again after it left.
    return true;
  }
  return false;
}

absl::Status ParameterManager::MovedAway(const std::string& job_id,
                                         int64_t version) {
  // The server's version is unknown here: it left the job.
  return WithMapVersionRefusal(
      absl::FailedPreconditionError(
          absl::StrCat("map_version: job ", job_id,
                       " moved off this server with shard map version ",
                       version, "; fetch the new map")),
      v1::MapVersionRefusal());
}

absl::Status ParameterManager::UnloadReasonLocked(const std::string& job_id) {
  move_reports_.erase(job_id);
  auto it = leaving_.find(job_id);
  if (it == leaving_.end()) return absl::AbortedError("job ended");
  const int64_t version = it->second;
  leaving_.erase(it);
  if (moved_away_.size() > 1000) moved_away_.clear();
  moved_away_[job_id] = version;
  PS_LOG_INFO("job ", job_id, ": moved off this server (shard map version ",
              version, ")");
  return MovedAway(job_id, version);
}

absl::StatusOr<std::unique_ptr<ServerJob>> ParameterManager::OpenJob(
    const v1::Assignment& rebuilt) {
  // A place rebuilt from a lost server's directory imports it first; the
  // job is opened without the rebuild.
  PS_ASSIGN_OR_RETURN(const v1::Assignment a, ImportIfRebuilt(rebuilt, store_));
  const int64_t version = a.shard_map().version();
  bool from_store = false;
  absl::StatusOr<std::optional<StoredJob>> staged =
      mover_.Staged(a.job_id(), version, &from_store);
  if (!staged.ok()) return staged.status();
  if (staged->has_value() && from_store && store_ != nullptr) {
    // A restart: the job may have been adopted already (its metadata is the
    // new map's, written last by ServerJob::AdoptMoved) and have taken
    // pushes since; then it opens from its own state and the copy goes.
    auto own = store_->Load(a.job_id());
    if (own.ok() && own->meta == StoredJobMeta(a)) {
      PS_LOG_INFO("job ", a.job_id(), ": already took over its units under ",
                  "shard map version ", version, "; deleting the staged copy");
      staged->reset();
      mover_.Adopted(a.job_id(), version);
    } else if (!own.ok() && !absl::IsNotFound(own.status())) {
      return own.status();
    }
  }
  if (!staged->has_value()) return OpenStored(a, store_);
  auto job = ServerJob::Open(a, store_, metrics_, job_options_, &**staged);
  if (job.ok()) mover_.Adopted(a.job_id(), version);
  return job;
}

}  // namespace ps

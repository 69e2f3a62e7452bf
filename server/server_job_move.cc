// ServerJob: server moves (docs/consistency.md, "Server moves";
// docs/durability.md, "A server move"). A change of a job's servers stops
// the job at a clock boundary every server agrees on, in the two steps of
// an elastic membership change: each server of the current map freezes its
// frontier (the first clock it accepted no push for) and reports it; the
// coordinator sets the boundary to the largest; pushes below it are still
// taken, none at or beyond it. Once every place's clock here is the
// boundary and durable, the units' state is the boundary's, and the servers
// of the new map copy their units from here (ExportUnits).
#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "server/server_job.h"

namespace ps {
namespace {

std::string FloatBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  }
  return bytes;
}

// One unit's state as FetchUnits carries it.
void AddUnitState(const StoredBlock& b, v1::UnitState* unit) {
  unit->set_key(b.key);
  unit->set_values(FloatBytes(b.values));
  unit->set_optimizer_state(FloatBytes(b.optimizer_state));
  unit->set_optimizer_step(b.optimizer_step);
  unit->set_rows(b.rows);
}

}  // namespace

ServerJob::MoveReport ServerJob::ApplyMapChange(
    const v1::Assignment& assignment) {
  const v1::ShardMapChange& change = assignment.map_change();
  MoveReport report;
  absl::MutexLock lock(&mu_);
  if (change.version() <= assignment_.shard_map().version()) {
    if (clocks_.move_version() != 0) {
      PS_LOG_INFO("job ", job_id_, ": the move to shard map version ",
                  clocks_.move_version(), " ended here; pushes taken again");
      clocks_.EndMove();
    }
    move_export_.reset();
    return report;
  }
  const bool fresh = clocks_.move_version() != change.version();
  report.version = change.version();
  report.frontier = clocks_.FreezeForMove(change.version());
  if (change.boundary_set()) {
    clocks_.SetMoveBoundary(change.version(), change.boundary_clock());
  }
  if (fresh) {
    PS_LOG_INFO("job ", job_id_, ": moving to shard map version ",
                change.version(), " (", change.reason(), "); frozen at clock ",
                report.frontier, ", clocks ",
                absl::StrJoin(clocks_.clocks(), " "));
  }
  return report;
}

absl::StatusOr<v1::FetchUnitsResponse> ServerJob::ExportUnits(
    const v1::FetchUnitsRequest& request) const {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return closed_;
  if (clocks_.move_version() != request.map_version() ||
      clocks_.move_frontier() != request.boundary_clock()) {
    return absl::UnavailableError(absl::StrCat(
        "map_change: job ", job_id_, " is not stopped for shard map version ",
        request.map_version(), " at clock ", request.boundary_clock(),
        " here yet (retry)"));
  }
  if (!clocks_.AllAt(request.boundary_clock())) {
    return absl::UnavailableError(
        absl::StrCat("map_change: job ", job_id_, " has not reached clock ",
                     request.boundary_clock(), " here yet: clocks ",
                     absl::StrJoin(clocks_.clocks(), " "), " (retry)"));
  }
  if (durability_.persistent()) {
    for (int p = 0; p < clocks_.num_workers(); ++p) {
      if (DurableClockLocked(p) < clocks_.clocks()[p]) {
        return absl::UnavailableError(absl::StrCat(
            "map_change: job ", job_id_, ": clock ", clocks_.clocks()[p],
            " of place ", p, " is not durable here yet (retry)"));
      }
    }
  }
  if (!move_export_.has_value() ||
      move_export_->version != request.map_version() ||
      move_export_->boundary != request.boundary_clock()) {
    move_export_ = ExportAtBoundaryLocked(request);
  }
  const std::set<uint64_t> wanted(request.keys().begin(), request.keys().end());
  v1::FetchUnitsResponse response;
  for (uint64_t key : wanted) {
    auto it = move_export_->units.find(key);
    if (it == move_export_->units.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys: job ", job_id_, ": unit ", key, " (",
                       IsBucketKey(key) ? "a sparse bucket" : "a dense block",
                       ") is not held here"));
    }
    AddUnitState(it->second, response.add_units());
  }
  for (int64_t c : clocks_.clocks()) response.add_worker_clocks(c);
  return response;
}

ServerJob::MoveExport ServerJob::ExportAtBoundaryLocked(
    const v1::FetchUnitsRequest& request) const {
  MoveExport out{.version = request.map_version(),
                 .boundary = request.boundary_clock()};
  for (StoredBlock& b : table_->Snapshot()) {
    const uint64_t key = b.key;
    out.units.emplace(key, std::move(b));
  }
  // Every row of every bucket, the tier's cold ones read through.
  for (StoredBlock& b : sparse_->Snapshot()) {
    const uint64_t key = b.key;
    out.units.emplace(key, std::move(b));
  }
  // A bucket placed here that never held a row (or no longer holds one)
  // has no snapshot block: it moves empty.
  for (const v1::BlockPlacement& p : assignment_.shard_map().blocks()) {
    if (p.server() == assignment_.index() && IsBucketKey(p.key()) &&
        !out.units.contains(p.key())) {
      out.units.emplace(p.key(), StoredBlock{.key = p.key()});
    }
  }
  PS_LOG_INFO("job ", job_id_, ": ", out.units.size(),
              " units ready to move at clock ", out.boundary,
              " (shard map version ", out.version, ")");
  return out;
}

absl::StatusOr<std::unique_ptr<ServerJob>> ServerJob::AdoptMoved(
    std::unique_ptr<ServerJob> job, ShardStore* store, StoredJob initial) {
  // Replaced, not merged: what the store held for the job (this server's
  // units under an older map, if any) is gone (DropJob: durably, without
  // waiting for a compaction), and the moved state becomes the job's first
  // snapshot; the job's metadata under the new map is written last, once
  // that snapshot is durable. So a stored job whose metadata is the new
  // map's was adopted whole: a crash before that leaves the staged copy
  // (UnitMover) from which the next open adopts again, and one after it
  // reopens the job from its own state (snapshot and log) even while the
  // staged copy, deleted off the serving path (UnitMover::Adopted), is
  // still there (ParameterManager::OpenJob).
  // A server added by the move stores nothing of the job: no deletion (and
  // its synced write) at all.
  PS_ASSIGN_OR_RETURN(std::vector<std::string> stored, store->ListJobs());
  if (std::binary_search(stored.begin(), stored.end(), job->job_id_)) {
    PS_RETURN_IF_ERROR(store->DropJob(job->job_id_));
  }
  initial.log_sequence = 0;
  initial.log.clear();
  PS_RETURN_IF_ERROR(job->Restore(std::move(initial)));
  {
    absl::MutexLock lock(&job->mu_);
    job->SnapshotLocked();
  }
  PS_RETURN_IF_ERROR(job->Flush());
  PS_RETURN_IF_ERROR(
      store->PutJobMeta(job->job_id_, StoredJobMeta(job->assignment_)));
  const std::string rows =
      job->sparse_->size() == 0
          ? std::string()
          : absl::StrCat(" and ", job->SparseRowCount(), " sparse rows");
  PS_LOG_INFO("job ", job->job_id_, ": took over ", job->table_->size(),
              " blocks", rows, " under shard map version ",
              job->assignment_.shard_map().version(), ", worker clocks ",
              job->ClocksString());
  return job;
}

}  // namespace ps

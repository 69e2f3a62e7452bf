// JobManager: a lost server's place rebuilt from shared storage (issue 29;
// coordinator/server_rebuild.h; docs/durability.md, "A lost server rebuilt
// from shared storage"). When a server place stays vacant past the
// recovery grace, the job fails unless the lost server's data directory is
// on shared storage and a free server with the same shared root is
// registered: that server then takes the place (its index, every unit) in
// a new map version that differs only in the place's address; it imports
// the lost server's state from its directory before it serves (the
// directory's RocksDB lock fences a lost server that is still alive), the
// other servers reopen the job under the new version, and the workers,
// refused under the old one, follow it from the clocks the servers hold.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/elastic_spec.h"
#include "common/logging.h"
#include "coordinator/job_manager.h"
#include "coordinator/server_rebuild.h"

namespace ps {

void JobManager::RecordServerStorage(Job& job, int index,
                                     const NodeRecord& node) {
  auto* storage = job.status.mutable_server_storage();
  while (storage->size() <= index) storage->Add();
  v1::ServerStorage& s = (*storage)[index];
  s.set_shared_data_root(node.shared_data_root);
  s.set_data_dir(node.data_dir);
}

bool JobManager::RebuildServer(Job& job, int index, absl::Time now,
                               std::string* why_not) {
  const v1::JobStatus& status = job.status;
  if (index >= status.server_storage_size() ||
      status.server_storage(index).shared_data_root().empty()) {
    return false;  // Not on shared storage: the job fails as it always did.
  }
  const v1::JobSpec& spec = status.spec();
  if (spec.durability() == v1::MEMORY) {
    *why_not = "the job's durability is MEMORY: its directory holds nothing";
    return false;
  }
  if (IsElastic(spec)) {
    *why_not = "an elastic job's workers do not follow a change of shard map";
    return false;
  }
  const v1::ServerStorage lost = status.server_storage(index);
  std::vector<std::string> free =
      nodes_.Free(PlaceFilter(v1::SERVER, /*durable_only=*/true), now);
  std::vector<RebuildCandidate> candidates;
  candidates.reserve(free.size());
  for (const std::string& id : free) {
    const NodeRecord& node = *nodes_.Find(id);
    candidates.push_back({node.address, node.shared_data_root});
  }
  absl::StatusOr<int> chosen =
      ChooseReplacement(lost, candidates, status.shard_map());
  absl::StatusOr<v1::ShardMap> next =
      chosen.ok()
          ? PlanRebuild(status.shard_map(), index, candidates[*chosen].address)
          : absl::StatusOr<v1::ShardMap>(chosen.status());
  if (!next.ok()) {
    *why_not = std::string(next.status().message());
    return false;
  }
  const std::string from = status.shard_map().servers(index);
  const int units = UnitsOn(status.shard_map(), index);
  v1::ShardMapMove* move = job.status.add_map_moves();
  move->set_version(next->version());
  move->set_clock(status.progress().clock());
  move->set_num_servers(next->servers_size());
  move->set_units_moved(units);
  move->set_requested_time_ms(absl::ToUnixMillis(now));
  move->set_committed_time_ms(absl::ToUnixMillis(now));
  move->set_rebuild(true);
  move->set_rebuilt_server(index);
  move->set_rebuilt_from_address(from);
  move->set_rebuilt_from_data_dir(lost.data_dir());
  *job.status.mutable_shard_map() = *std::move(next);
  Attach(job, v1::SERVER, index, free[*chosen]);
  PS_LOG_WARNING("job ", job.status.job_id(), ": server ", index, " (", from,
                 ") was not back within ",
                 absl::FormatDuration(timing_.recovery_grace), "; ",
                 candidates[*chosen].address, " takes its place and its ",
                 units, " units, rebuilt from ", lost.data_dir(),
                 " (shard map version ", job.status.shard_map().version(), ")");
  PublishVacancies(job);
  Changed(job);
  return true;
}

void JobManager::NoteRebuiltAway(const NodeRecord& node) const {
  for (const auto& [id, job] : jobs_) {
    if (job.status.state() != v1::RUNNING) continue;
    for (const v1::ShardMapMove& move : job.status.map_moves()) {
      if (!move.rebuild() || move.rebuilt_from_address() != node.address) {
        continue;
      }
      const auto& servers = job.status.shard_map().servers();
      if (std::find(servers.begin(), servers.end(), node.address) !=
          servers.end()) {
        continue;
      }
      PS_LOG_WARNING("server at ", node.address, " registers again, but its ",
                     "place ", move.rebuilt_server(), " in job ", id,
                     " was rebuilt elsewhere at shard map version ",
                     move.version(), ": it stays free, and its copy of ",
                     "the job is stale (deleted when the job ends)");
      break;
    }
  }
}

}  // namespace ps

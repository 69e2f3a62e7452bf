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
// With no free server, a surviving server of the job hosts the place beside
// its own (server/hosted_places.h; docs/durability.md, "A lost server
// rebuilt on the surviving servers").
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
  RebuildTarget target;
  if (!ChooseRebuildTarget(job, index, lost, now, &target, why_not)) {
    return false;
  }
  absl::StatusOr<v1::ShardMap> next =
      PlanRebuild(status.shard_map(), index, target.address);
  if (!next.ok()) {
    *why_not = std::string(next.status().message());
    return false;
  }
  const std::string from = status.shard_map().servers(index);
  const int units = UnitsOn(status.shard_map(), index);
  const bool was_hosted = IsHostedPlace(status, index);
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
  move->set_rebuilt_onto_survivor(target.survivor);
  move->set_rebuilt_from_hosted(was_hosted);
  *job.status.mutable_shard_map() = *std::move(next);
  if (target.survivor) {
    AttachHosted(job, index, target.node_id);
  } else {
    Attach(job, v1::SERVER, index, target.node_id);
  }
  PS_LOG_WARNING("job ", job.status.job_id(), ": server ", index, " (", from,
                 ") was not back within ",
                 absl::FormatDuration(timing_.recovery_grace), "; ",
                 target.address,
                 target.survivor ? " (a surviving server of the job, no free "
                                   "server being there) hosts its place and "
                                 : " takes its place and ",
                 "its ", units, " units, rebuilt from ", lost.data_dir(),
                 " (shard map version ", job.status.shard_map().version(), ")");
  PublishVacancies(job);
  Changed(job);
  return true;
}

bool JobManager::ChooseRebuildTarget(const Job& job, int index,
                                     const v1::ServerStorage& lost,
                                     absl::Time now, RebuildTarget* target,
                                     std::string* why_not) const {
  const v1::JobStatus& status = job.status;
  // First choice: a free server takes the place as its own.
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
  if (chosen.ok()) {
    *target = {.node_id = free[*chosen],
               .address = candidates[*chosen].address,
               .survivor = false};
    return true;
  }
  // Else a surviving server of the job hosts it beside its own: only for
  // workers that name the place of each request (ps-worker does).
  if (status.spec().model().kind() == v1::ModelSpec::EXTERNAL) {
    *why_not = absl::StrCat(
        chosen.status().message(),
        ", and an EXTERNAL model's workers (the Python SDK) do not name the "
        "place of their requests, which a surviving server hosting a second "
        "place needs");
    return false;
  }
  std::vector<SurvivorCandidate> survivors;
  std::vector<std::string> survivor_nodes;
  for (size_t j = 0; j < job.servers.size(); ++j) {
    const std::string& node_id = job.servers[j].node_id;
    if (static_cast<int>(j) == index || node_id.empty() ||
        IsHostedPlace(status, static_cast<int>(j))) {
      continue;
    }
    const NodeRecord* node = nodes_.Find(node_id);
    if (node == nullptr) continue;
    survivors.push_back({.place = static_cast<int>(j),
                         .address = node->address,
                         .shared_data_root = node->shared_data_root,
                         .durable = node->durable});
    survivor_nodes.push_back(node_id);
  }
  absl::StatusOr<int> host =
      ChooseSurvivor(lost, survivors, status.shard_map());
  if (!host.ok()) {
    *why_not = absl::StrCat(chosen.status().message(), ", and ",
                            host.status().message());
    return false;
  }
  *target = {.node_id = survivor_nodes[*host],
             .address = survivors[*host].address,
             .survivor = true};
  return true;
}

void JobManager::AttachHosted(Job& job, int index, const std::string& node_id) {
  Slot& slot = job.servers[index];
  slot = Slot();  // Held from now on (vacant_since: never).
  slot.node_id = node_id;
  slot.has_shards = true;  // Imported when the host takes the assignment.
  // Where the place's state lives now (under its hosted id): a later loss
  // of the host rebuilds it from there.
  RecordServerStorage(job, index, *nodes_.Find(node_id));
  PS_LOG_INFO("job ", job.status.job_id(), ": node ", node_id,
              " hosts server place ", index, " beside its own");
}

void JobManager::VacateHostedPlaces(Job& job, const std::string& node_id,
                                    int own_index, absl::Time now) {
  for (size_t i = 0; i < job.servers.size(); ++i) {
    Slot& slot = job.servers[i];
    if (static_cast<int>(i) == own_index || slot.node_id != node_id) continue;
    slot.node_id.clear();
    slot.vacant_since = now;
    slot.last_node_id = node_id;
    slot.last_address = job.status.shard_map().servers(i);
    PS_LOG_WARNING("job ", job.status.job_id(), ": server place ", i,
                   ", hosted by ", node_id, ", is vacant with its host");
  }
}

void JobManager::AddHostedAssignments(const Job& job, const NodeRecord& node,
                                      const std::string& node_id,
                                      v1::HeartbeatResponse* response) const {
  for (size_t i = 0; i < job.servers.size(); ++i) {
    if (static_cast<int>(i) == node.index ||
        job.servers[i].node_id != node_id) {
      continue;
    }
    *response->add_assignments() =
        AssignmentOf(job, static_cast<int>(i), v1::SERVER);
  }
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

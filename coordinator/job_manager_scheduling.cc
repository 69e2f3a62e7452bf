// JobManager: scheduling. Starting pending jobs on free nodes, giving lost
// workers' places to free workers, failing jobs whose places stayed vacant,
// and publishing the vacant places.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_progress.h"
#include "coordinator/shard_planner.h"

namespace ps {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// "1 server", "2 servers".
std::string Count(int64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace

void JobManager::Attach(Job& job, v1::NodeRole role, int index,
                        const std::string& node_id) {
  Slot& slot = (role == v1::SERVER ? job.servers : job.workers)[index];
  if (!slot.node_id.empty() && slot.node_id != node_id) {
    // The previous holder is gone (same address, or its place was vacant).
    nodes_.Release(slot.node_id);
  }
  const bool recovered = slot.vacant_since != absl::InfiniteFuture();
  slot = Slot();  // Held from now on (vacant_since: never).
  slot.node_id = node_id;
  NodeRecord& node = *nodes_.Find(node_id);
  if (role == v1::SERVER) RecordServerStorage(job, index, node);
  node.job_id = job.status.job_id();
  node.index = index;
  if (recovered) {
    PS_LOG_INFO("job ", job.status.job_id(), ": node ", node_id, " takes ",
                RoleName(role), " ", index);
  }
}

void JobManager::Recover(absl::Time now) {
  for (auto& [id, job] : jobs_) {
    if (job.status.state() != v1::RUNNING) continue;
    std::vector<std::string> free =
        nodes_.Free(PlaceFilter(v1::WORKER, /*durable_only=*/false, &job), now);
    for (size_t i = 0; i < job.workers.size() && !free.empty(); ++i) {
      if (!job.workers[i].node_id.empty() || job.workers[i].removed) continue;
      Attach(job, v1::WORKER, i, free.front());
      free.erase(free.begin());
    }
    if (PublishVacancies(job)) Changed(job);
    // Elastic jobs drop lost workers after the grace, and take free ones;
    // places lost while a change is in progress wait for the next one.
    RecoverElastic(job, now);
    // A server move: abandoned when one of its servers was lost.
    AdvanceMapChange(job);
    const std::vector<int> droppable = DroppablePlaces(job, now);
    for (const auto& [slots, role] :
         {std::pair{&job.servers, v1::SERVER}, {&job.workers, v1::WORKER}}) {
      for (size_t i = 0; i < slots->size(); ++i) {
        const Slot& slot = (*slots)[i];
        if (role == v1::WORKER &&
            std::find(droppable.begin(), droppable.end(),
                      static_cast<int>(i)) != droppable.end()) {
          continue;
        }
        if (slot.node_id.empty() && !slot.removed &&
            now - slot.vacant_since > timing_.recovery_grace) {
          // A server on shared storage: a free server rebuilds its place.
          std::string not_rebuilt;
          if (role == v1::SERVER &&
              RebuildServer(job, static_cast<int>(i), now, &not_rebuilt)) {
            continue;
          }
          if (!not_rebuilt.empty()) {
            not_rebuilt = absl::StrCat(" (not rebuilt: ", not_rebuilt, ")");
          }
          Finish(
              job, v1::FAILED,
              absl::StrCat(RoleName(role), " ", i, " (",
                           slot.last_address.empty() ? "address unknown"
                                                     : slot.last_address,
                           ") was lost and not ",
                           role == v1::SERVER ? "back" : "replaced", " within ",
                           absl::FormatDuration(timing_.recovery_grace),
                           not_rebuilt));
          break;
        }
      }
      if (job.status.state() != v1::RUNNING) break;
    }
  }
}

// Scheduling policy (docs/operations.md): pending jobs start in submission
// order; a job that needs more servers or workers than are registered (or, for
// a durable job, more servers with a data directory) does not hold back later
// jobs, and says what it waits for; a job that fits the registered nodes but
// waits for busy ones to free up holds back the jobs after it, so that a
// stream of small jobs cannot starve a large one.
void JobManager::Schedule(absl::Time now) {
  std::string blocker;  // The first job waiting for busy nodes.
  for (auto& [id, job] : jobs_) {
    if (job.status.state() != v1::PENDING) continue;
    const v1::JobSpec& spec = job.status.spec();
    if (std::vector<std::string> missing = MissingNodes(job, now);
        !missing.empty()) {
      SetPendingMessage(
          job, absl::StrCat("waiting for ", absl::StrJoin(missing, " and ")));
      continue;
    }
    if (!blocker.empty()) {
      SetPendingMessage(job, absl::StrCat("queued behind ", blocker,
                                          ", which waits for busy nodes"));
      continue;
    }
    const bool durable = spec.durability() != v1::MEMORY;
    std::vector<std::string> servers =
        nodes_.Free(PlaceFilter(v1::SERVER, durable), now);
    std::vector<std::string> workers =
        nodes_.Free(PlaceFilter(v1::WORKER, /*durable_only=*/false, &job), now);
    if (static_cast<int>(servers.size()) < spec.num_servers() ||
        static_cast<int>(workers.size()) < spec.num_workers()) {
      SetPendingMessage(
          job, absl::StrCat("waiting for busy nodes to free up: needs ",
                            Count(spec.num_servers(), "server"), " and ",
                            Count(spec.num_workers(), "worker"), "; ",
                            Count(servers.size(), "server"), " and ",
                            Count(workers.size(), "worker"), " free"));
      blocker = id;
      continue;
    }
    servers.resize(spec.num_servers());
    workers.resize(spec.num_workers());
    StartJob(job, servers, workers);
  }
}

std::vector<std::string> JobManager::MissingNodes(const Job& job,
                                                  absl::Time now) const {
  const v1::JobSpec& spec = job.status.spec();
  const bool durable = spec.durability() != v1::MEMORY;
  const int servers_registered =
      nodes_.CountLive(PlaceFilter(v1::SERVER, durable), now);
  const int workers_registered = nodes_.CountLive(
      PlaceFilter(v1::WORKER, /*durable_only=*/false, &job), now);
  std::vector<std::string> missing;
  if (servers_registered < spec.num_servers()) {
    std::string servers = Count(spec.num_servers(), "server");
    if (durable) {
      const v1::Durability durability =
          spec.durability() == v1::DURABILITY_UNSPECIFIED ? v1::WAL
                                                          : spec.durability();
      absl::StrAppend(
          &servers, " with a data directory (durability ",
          v1::Durability_Name(durability), "), ", servers_registered,
          " registered (",
          Count(nodes_.CountLive(PlaceFilter(v1::SERVER), now), "server"),
          " in all)");
    } else {
      absl::StrAppend(&servers, ", ", servers_registered, " registered");
    }
    missing.push_back(std::move(servers));
  }
  if (workers_registered < spec.num_workers()) {
    if (spec.model().kind() == v1::ModelSpec::EXTERNAL) {
      // Only Python workers whose module matches count (WorkerFits).
      missing.push_back(absl::StrCat(Count(spec.num_workers(), "Python worker"),
                                     " with model ", job.model_digest, ", ",
                                     workers_registered, " registered"));
    } else {
      missing.push_back(absl::StrCat(Count(spec.num_workers(), "worker"), ", ",
                                     workers_registered, " registered"));
    }
  }
  return missing;
}

void JobManager::StartJob(Job& job, const std::vector<std::string>& servers,
                          const std::vector<std::string>& workers) {
  std::vector<std::string> addresses;
  addresses.reserve(servers.size());
  for (const std::string& s : servers) {
    addresses.push_back(nodes_.Find(s)->address);
  }
  auto map = PlanShards(job.status.spec(), addresses, /*version=*/1);
  if (!map.ok()) {
    Finish(job, v1::FAILED, std::string(map.status().message()));
    return;
  }
  *job.status.mutable_shard_map() = *std::move(map);
  job.servers.assign(servers.size(), Slot());
  job.workers.assign(workers.size(), Slot());
  for (size_t i = 0; i < servers.size(); ++i) {
    Attach(job, v1::SERVER, i, servers[i]);
  }
  for (size_t i = 0; i < workers.size(); ++i) {
    Attach(job, v1::WORKER, i, workers[i]);
  }
  job.reports.assign(workers.size(), NoReport());
  StartMembership(job);
  job.status.set_state(v1::RUNNING);
  job.status.clear_message();
  job.status.set_start_time_ms(NowMs());
  PS_LOG_INFO("job ", job.status.job_id(), " running on ", servers.size(),
              " servers and ", workers.size(), " workers");
  Changed(job);
}

void JobManager::SetPendingMessage(Job& job, const std::string& message) {
  if (job.status.message() == message) return;
  job.status.set_message(message);
  PS_LOG_INFO("job ", job.status.job_id(), " pending: ", message);
  Changed(job);
}

bool JobManager::PublishVacancies(Job& job) {
  google::protobuf::RepeatedPtrField<v1::VacantPlace> vacant;
  for (const auto& [slots, role] :
       {std::pair{&job.servers, v1::SERVER}, {&job.workers, v1::WORKER}}) {
    for (size_t i = 0; i < slots->size(); ++i) {
      const Slot& slot = (*slots)[i];
      if (!slot.node_id.empty() || slot.removed) continue;
      v1::VacantPlace* place = vacant.Add();
      place->set_role(RoleName(role));
      place->set_index(i);
      place->set_last_node_id(slot.last_node_id);
      place->set_last_address(slot.last_address);
      if (slot.vacant_since != absl::InfiniteFuture()) {
        place->set_vacant_since_ms(absl::ToUnixMillis(slot.vacant_since));
        place->set_deadline_ms(
            absl::ToUnixMillis(slot.vacant_since + timing_.recovery_grace));
      }
    }
  }
  if (IsTerminal(job.status.state())) vacant.Clear();
  bool same = vacant.size() == job.status.vacant_size();
  for (int i = 0; same && i < vacant.size(); ++i) {
    same = vacant[i].SerializeAsString() ==
           job.status.vacant(i).SerializeAsString();
  }
  if (same) return false;
  *job.status.mutable_vacant() = std::move(vacant);
  return true;
}

}  // namespace ps

// JobManager: server moves (psctl scale; docs/consistency.md, "Server
// moves"; docs/durability.md, "A server move"). A change of a running job's
// servers is a new shard map version that takes effect at a clock boundary
// every server agrees on, in the steps of an elastic membership change,
// driven by heartbeats:
//   1. Scale: the new map is planned (PlanMove: few units move) and the
//      servers added are attached to the job; every server of the current
//      map freezes its frontier (the first clock it accepted no push for)
//      and reports it.
//   2. Boundary, once every server of the current map reported: the
//      largest frontier C. Servers take pushes below C, none at or beyond;
//      every server of the new map copies its units from their owners once
//      those hold every place's pushes below C durably, stores them durably
//      apart from the job's current state, and reports them staged.
//   3. Commit, once every server of the new map staged: the decision is
//      written (map_change.committed) and, once durable, the new map
//      replaces the old one (FinishMapChange); servers open the job from
//      the staged units, servers that left drop it, and workers, refused
//      under the old version, fetch the new map and go on from C.
// A server lost before the commit abandons the move: the job stays on the
// old map (its state there is whole: nothing at or beyond C was taken).
// Every step travels by heartbeat: while the move runs, the job's servers
// and workers are told to heartbeat every move_heartbeat_interval
// (MoveHeartbeatInterval), and the current map's servers are told of the
// move only once all of them are (MapChangeAnnounced), so that they freeze
// within one short interval of each other and the pause does not depend on
// the registered heartbeat interval.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/elastic_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/server_rebuild.h"
#include "coordinator/shard_move_planner.h"

namespace ps {

absl::Status JobManager::CheckScalable(const Job& job, int num_servers) const {
  const v1::JobStatus& status = job.status;
  const std::string& id = status.job_id();
  if (status.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", v1::JobState_Name(status.state()),
                     ": only a RUNNING job's servers can be scaled"));
  }
  if (IsElastic(status.spec())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, " is elastic (min_workers < max_workers): moving its ",
        "servers is not built yet"));
  }
  if (status.map_change().version() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", id, ": a move to shard map version ",
        status.map_change().version(), " (", status.map_change().reason(),
        ") is in progress; scale again once it ends"));
  }
  for (size_t i = 0; i < job.servers.size(); ++i) {
    if (job.servers[i].node_id.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, ": server ", i, " is vacant (lost); ",
                       "scale once it is back"));
    }
    if (IsHostedPlace(status, static_cast<int>(i))) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", id, ": server place ", i, " is hosted by another server ",
          "of the job (a lost server rebuilt onto a survivor); moving such ",
          "a job's servers is not built"));
    }
  }
  if (num_servers > status.shard_map().blocks_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_servers: ", num_servers, " is more than job ", id,
                     "'s ", status.shard_map().blocks_size(),
                     " placement units (dense blocks and sparse buckets)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobStatus> JobManager::Scale(const std::string& job_id,
                                                int num_servers) {
  return AwaitResult<absl::StatusOr<v1::JobStatus>>([&](StatusDone done) {
    return ScaleAsync(job_id, num_servers, std::move(done));
  });
}

absl::Status JobManager::ScaleAsync(const std::string& job_id, int num_servers,
                                    StatusDone done) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  if (num_servers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_servers: must be >= 1, got ", num_servers));
  }
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(Job * found, FindJobLocked(job_id));
  Job& job = *found;
  PS_RETURN_IF_ERROR(CheckScalable(job, num_servers));
  const v1::ShardMap& current = job.status.shard_map();
  const int old_n = current.servers_size();
  if (num_servers == old_n) {
    writer_->Put(job.status, AnswerWhenDurable(std::move(done), job.status));
    return absl::OkStatus();
  }
  std::vector<std::string> addresses(
      current.servers().begin(),
      current.servers().begin() + std::min(old_n, num_servers));
  std::vector<std::string> added;
  if (num_servers > old_n) {
    const bool durable = job.status.spec().durability() != v1::MEMORY;
    added = nodes_.Free(PlaceFilter(v1::SERVER, durable), absl::Now());
    const int needed = num_servers - old_n;
    if (static_cast<int>(added.size()) < needed) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "num_servers: ", num_servers, " needs ", needed, " more ",
          durable ? "durable " : "", "servers, but ", added.size(),
          added.size() == 1 ? " is" : " are", " free"));
    }
    added.resize(needed);
    for (const std::string& node : added) {
      addresses.push_back(nodes_.Find(node)->address);
    }
  }
  PS_ASSIGN_OR_RETURN(v1::ShardMap next,
                      PlanMove(current, addresses, current.version() + 1));
  v1::ShardMapChange* change = job.status.mutable_map_change();
  change->set_version(next.version());
  change->set_requested_time_ms(absl::ToUnixMillis(absl::Now()));
  change->set_reason(absl::StrCat("scale ", old_n, " -> ", num_servers,
                                  " servers, ", UnitsMoved(current, next),
                                  " of ", next.blocks_size(), " units move"));
  *change->mutable_shard_map() = std::move(next);
  job.map_frontiers.clear();
  job.map_staged.clear();
  job.map_alerted.clear();
  for (size_t i = 0; i < added.size(); ++i) {
    job.servers.emplace_back();
    Attach(job, v1::SERVER, old_n + static_cast<int>(i), added[i]);
  }
  PS_LOG_INFO("job ", job_id, ": moving to shard map version ",
              change->version(), " (", change->reason(), ")");
  // Answered once the record with the proposal is durable: a coordinator
  // restarted after the answer finds the proposal and abandons it visibly
  // (LoadMapChange) rather than never having had it.
  Changed(job, AnswerWhenDurable(std::move(done), job.status));
  return absl::OkStatus();
}

int64_t JobManager::MoveHeartbeatInterval(Job& job, v1::NodeRole role,
                                          int index) {
  const v1::ShardMapChange& change = job.status.map_change();
  if (change.version() == 0 || job.status.state() != v1::RUNNING) return 0;
  if (role == v1::SERVER && index < job.status.shard_map().servers_size()) {
    job.map_alerted.insert(index);
  }
  return absl::ToInt64Milliseconds(
      std::min(timing_.move_heartbeat_interval, timing_.heartbeat_interval));
}

bool JobManager::MapChangeAnnounced(const Job& job, int index) {
  const int old_n = job.status.shard_map().servers_size();
  if (index >= old_n) return true;
  for (int i = 0; i < old_n; ++i) {
    if (!job.map_alerted.contains(i)) return false;
  }
  return true;
}

void JobManager::RecordMapChangeAck(Job& job, int index,
                                    const v1::HeldAssignment& held) {
  const v1::ShardMapChange& change = job.status.map_change();
  if (change.version() == 0 || change.committed()) return;
  if (!change.boundary_set() && held.map_change_version() == change.version() &&
      index < job.status.shard_map().servers_size()) {
    job.map_frontiers[index] = held.map_frontier_clock();
  }
  if (change.boundary_set() && held.map_staged_version() == change.version()) {
    job.map_staged.insert(index);
  }
  AdvanceMapChange(job);
}

void JobManager::AdvanceMapChange(Job& job) {
  v1::ShardMapChange& change = *job.status.mutable_map_change();
  if (change.version() == 0 || change.committed() ||
      job.status.state() != v1::RUNNING) {
    return;
  }
  for (size_t i = 0; i < job.servers.size(); ++i) {
    if (job.servers[i].node_id.empty()) {
      AbandonMapChange(
          job, absl::StrCat("server ", i, " (", job.servers[i].last_address,
                            ") was lost during the move"));
      return;
    }
  }
  const int old_n = job.status.shard_map().servers_size();
  if (!change.boundary_set()) {
    int64_t boundary = 0;
    for (int i = 0; i < old_n; ++i) {
      auto it = job.map_frontiers.find(i);
      if (it == job.map_frontiers.end()) return;
      boundary = std::max(boundary, it->second);
    }
    change.set_boundary_set(true);
    change.set_boundary_clock(boundary);
    PS_LOG_INFO("job ", job.status.job_id(), ": the move to shard map version ",
                change.version(), " stops at clock ", boundary);
    Changed(job);
    return;
  }
  for (int i = 0; i < change.shard_map().servers_size(); ++i) {
    if (!job.map_staged.contains(i)) return;
  }
  CommitMapChange(job);
}

void JobManager::AbandonMapChange(Job& job, const std::string& why) {
  const v1::ShardMapChange& change = job.status.map_change();
  PS_LOG_WARNING("job ", job.status.job_id(), ": the move to shard map ",
                 "version ", change.version(), " is abandoned (", why,
                 "); the job stays on version ",
                 job.status.shard_map().version());
  const int old_n = job.status.shard_map().servers_size();
  for (size_t i = old_n; i < job.servers.size(); ++i) {
    if (!job.servers[i].node_id.empty()) nodes_.Release(job.servers[i].node_id);
  }
  job.servers.resize(old_n);
  job.status.clear_map_change();
  job.map_frontiers.clear();
  job.map_staged.clear();
  job.map_alerted.clear();
  PublishVacancies(job);
  Changed(job);
}

void JobManager::CommitMapChange(Job& job) {
  job.status.mutable_map_change()->set_committed(true);
  const std::string id = job.status.job_id();
  const int64_t version = job.status.map_change().version();
  PS_LOG_INFO("job ", id, ": every server holds its units for shard map ",
              "version ", version, "; committing");
  // Published only once the decision is durable: a coordinator restarted
  // before then abandons the move, one restarted after finishes it.
  Changed(job, [this, id, version](const absl::Status& written) {
    if (!written.ok()) return;  // The coordinator stops serving.
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    const v1::ShardMapChange& change = it->second.status.map_change();
    if (change.version() == version && change.committed()) {
      FinishMapChange(it->second);
    }
  });
}

void JobManager::FinishMapChange(Job& job) {
  const v1::ShardMapChange change = job.status.map_change();
  const v1::ShardMap& old = job.status.shard_map();
  v1::ShardMapMove* move = job.status.add_map_moves();
  move->set_version(change.version());
  move->set_clock(change.boundary_clock());
  move->set_num_servers(change.shard_map().servers_size());
  move->set_units_moved(UnitsMoved(old, change.shard_map()));
  move->set_requested_time_ms(change.requested_time_ms());
  move->set_committed_time_ms(absl::ToUnixMillis(absl::Now()));
  const int new_n = change.shard_map().servers_size();
  for (size_t i = new_n; i < job.servers.size(); ++i) {
    if (!job.servers[i].node_id.empty()) nodes_.Release(job.servers[i].node_id);
  }
  if (static_cast<int>(job.servers.size()) > new_n) job.servers.resize(new_n);
  *job.status.mutable_shard_map() = change.shard_map();
  job.status.clear_map_change();
  job.map_frontiers.clear();
  job.map_staged.clear();
  job.map_alerted.clear();
  PS_LOG_INFO("job ", job.status.job_id(), ": shard map version ",
              change.version(), " in effect from clock ",
              change.boundary_clock(), " (", change.reason(), ")");
  PublishVacancies(job);
  Changed(job);
}

void JobManager::LoadMapChange(Job& job) {
  const v1::ShardMapChange& change = job.status.map_change();
  if (change.version() == 0) return;
  if (change.committed()) {
    FinishMapChange(job);
    return;
  }
  PS_LOG_WARNING("job ", job.status.job_id(), ": the move to shard map ",
                 "version ", change.version(), " was not committed before ",
                 "the coordinator stopped; the job stays on version ",
                 job.status.shard_map().version());
  job.status.clear_map_change();
  Changed(job);
}

}  // namespace ps

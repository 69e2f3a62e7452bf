// JobManager: cluster membership. Registration (and the places a node comes
// back to), heartbeats, and lease expiry.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/server_rebuild.h"

namespace ps {

absl::StatusOr<v1::RegisterResponse> JobManager::Register(
    const v1::RegisterRequest& request, const std::string& peer_host) {
  PS_RETURN_IF_ERROR(ValidateRegisterRequest(request));
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (request.role() == v1::WORKER && !request.job_id().empty()) {
    if (auto s = AdmitWorkerForJob(request); !s.ok()) {
      PS_LOG_WARNING("refused a worker's registration for job ",
                     request.job_id(), ": ", s.message());
      return s;
    }
  }
  if (request.role() == v1::SERVER) {
    PS_RETURN_IF_ERROR(ValidateSharedStorage(request));
    if (auto s = AdmitServer(request, peer_host, now); !s.ok()) {
      PS_LOG_WARNING("refused a server's registration from ",
                     peer_host.empty() ? "an unknown host" : peer_host, ": ",
                     s.message());
      return s;
    }
  }
  NodeRecord record;
  record.role = request.role();
  record.address = request.address();
  record.peer_host = peer_host;
  record.durable = request.durable();
  record.storage_id = request.storage_id();
  record.shared_data_root = request.shared_data_root();
  record.data_dir = request.data_dir();
  record.model_digest = request.model_digest();
  record.only_job = request.job_id();
  record.last_seen = now;
  const std::string id = nodes_.Add(std::move(record));
  const NodeRecord& node = *nodes_.Find(id);
  PS_LOG_INFO("node ", id, " registered (",
              request.address().empty() ? peer_host : request.address(),
              node.role == v1::SERVER
                  ? (node.durable ? ", durable" : ", in-memory store")
                  : "",
              ")");
  if (node.role == v1::SERVER) {
    ReturnServerPlaces(id, request);
  } else {
    for (const v1::HeldAssignment& held : request.held()) {
      auto it = jobs_.find(held.job_id());
      const int i = held.index();
      if (it == jobs_.end() || it->second.status.state() != v1::RUNNING ||
          i < 0 || i >= static_cast<int>(it->second.workers.size()) ||
          it->second.workers[i].removed || !node.job_id.empty() ||
          !WorkerFits(node, it->second)) {
        continue;
      }
      Job& job = it->second;
      const std::string& holder = job.workers[i].node_id;
      if (holder.empty() || nodes_.Find(holder) == nullptr) {
        Attach(job, v1::WORKER, i, id);
        if (PublishVacancies(job)) Changed(job);
      }
    }
  }
  UpdateGauges();
  Recover(now);
  Schedule(now);
  v1::RegisterResponse response;
  response.set_node_id(id);
  response.set_lease_ms(absl::ToInt64Milliseconds(timing_.lease));
  response.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(timing_.heartbeat_interval));
  return response;
}

absl::Status JobManager::AdmitWorkerForJob(
    const v1::RegisterRequest& request) const {
  PS_ASSIGN_OR_RETURN(const Job* found, FindJobLocked(request.job_id()));
  const Job& job = *found;
  if (IsTerminal(job.status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job_id: job ", request.job_id(), " already ended (",
                     v1::JobState_Name(job.status.state()), ")"));
  }
  NodeRecord node;
  node.model_digest = request.model_digest();
  node.only_job = request.job_id();
  if (WorkerFits(node, job)) return absl::OkStatus();
  if (request.model_digest().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model_digest: job ", request.job_id(),
        " trains an EXTERNAL model; only a worker with a matching model "
        "(paramserver.torch.Worker) can take it"));
  }
  // Name the job's tensors, so that the worker can say which differ.
  std::string tensors;
  auto specs = ModelTensors(job.status.spec().model());
  if (specs.ok()) {
    for (const TensorSpec& t : *specs) {
      if (tensors.size() > 1500) {
        absl::StrAppend(&tensors, " ...");
        break;
      }
      absl::StrAppend(&tensors, " ", t.name, "[", absl::StrJoin(t.shape, ","),
                      "]");
    }
  }
  // And its sparse tables (before the tensors, which end the message).
  std::string tables;
  for (const auto& table : job.status.spec().model().sparse_tables()) {
    if (tables.size() > 1500) {
      absl::StrAppend(&tables, " ...");
      break;
    }
    absl::StrAppend(&tables, " ", table.name(), "/", table.dim());
  }
  if (!tables.empty()) {
    tables = absl::StrCat("; the job's sparse tables (name/dim):", tables);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model_digest: the worker's model (", request.model_digest(),
      ") does not match job ", request.job_id(), "'s (", job.model_digest, ")",
      tables, "; the job's tensors:", tensors));
}

absl::Status JobManager::AdmitServer(const v1::RegisterRequest& request,
                                     const std::string& peer_host,
                                     absl::Time now) {
  PS_ASSIGN_OR_RETURN(std::optional<std::string> replaced,
                      nodes_.ServerToReplace(request, peer_host, now));
  if (!replaced.has_value()) return absl::OkStatus();
  PS_LOG_INFO("server at ", request.address(), " registers again; node ",
              *replaced, " is replaced");
  for (auto& [job_id, job] : jobs_) {
    for (Slot& slot : job.servers) {
      if (slot.node_id == *replaced) {
        slot.last_node_id = *replaced;
        slot.last_address = request.address();
        slot.node_id.clear();
        slot.vacant_since = now;
      }
    }
  }
  nodes_.Erase(*replaced);
  return absl::OkStatus();
}

void JobManager::ReturnServerPlaces(const std::string& node_id,
                                    const v1::RegisterRequest& request) {
  const NodeRecord& node = *nodes_.Find(node_id);
  NoteRebuiltAway(node);
  for (auto& [job_id, job] : jobs_) {
    if (job.status.state() != v1::RUNNING || !node.job_id.empty()) continue;
    const auto& servers = job.status.shard_map().servers();
    for (int i = 0; i < servers.size(); ++i) {
      if (servers[i] != node.address) continue;
      // (A structured binding is not captured: clang 14 cannot.)
      const std::string& id = job_id;
      const bool holds = std::any_of(
          request.held().begin(), request.held().end(),
          [&](const v1::HeldAssignment& h) { return h.job_id() == id; });
      // Shards were stored on that place once the server said so, or once a
      // worker completed a step (which every server acknowledged).
      const bool had_shards =
          job.servers[i].has_shards || job.status.progress().clock() > 0;
      // A place rebuilt from a lost server imports its state when it is
      // assigned (RebuildSourceOf), so it may come without it.
      if (!holds && had_shards && RebuildSourceOf(job.status, i) == nullptr) {
        Finish(
            job, v1::FAILED,
            absl::StrCat("server ", i, " at ", node.address,
                         " came back without job ", job_id, "'s shards (",
                         job.status.spec().durability() == v1::MEMORY
                             ? "its durability is MEMORY: a restart loses them"
                             : "data directory lost or replaced",
                         ")"));
        break;
      }
      if (IsHostedPlace(job.status, i)) {
        AttachHosted(job, i, node_id);  // Its own place stays its index.
      } else {
        Attach(job, v1::SERVER, i, node_id);
        job.servers[i].has_shards = holds;
      }
      if (PublishVacancies(job)) Changed(job);
    }
  }
}

absl::StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(
    const std::string& node_id) {
  v1::HeartbeatRequest request;
  request.set_node_id(node_id);
  return Heartbeat(request);
}

absl::StatusOr<v1::HeartbeatResponse> JobManager::Heartbeat(
    const v1::HeartbeatRequest& request) {
  PS_RETURN_IF_ERROR(ValidateHeartbeatRequest(request));
  absl::MutexLock lock(&mu_);
  NodeRecord* found = nodes_.Find(request.node_id());
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "node_id: unknown node \"", request.node_id(), "\"; register again"));
  }
  NodeRecord& node = *found;
  node.last_seen = absl::Now();
  v1::HeartbeatResponse response;
  if (!node.job_id.empty()) {
    Job& job = jobs_.at(node.job_id);
    for (const v1::HeldAssignment& held : request.held()) {
      if (held.job_id() != node.job_id) continue;
      if (node.role == v1::SERVER) {
        job.servers[node.index].has_shards = true;
      }
      // Elastic jobs: a server's report on a membership change, or a
      // joining worker's readiness.
      RecordMembershipAck(job, node.role, node.index, held);
      // A server's report on a move of the job's servers.
      if (node.role == v1::SERVER) RecordMapChangeAck(job, node.index, held);
    }
    // Fast heartbeats while the job's servers move (before AssignmentOf:
    // the last server alerted is told of the move in this answer).
    response.set_heartbeat_interval_ms(
        MoveHeartbeatInterval(job, node.role, node.index));
    *response.add_assignments() = AssignmentOf(job, node.index, node.role);
    if (node.role == v1::SERVER) {
      AddHostedAssignments(job, node, request.node_id(), &response);
    }
  }
  return response;
}

v1::Assignment JobManager::AssignmentOf(const Job& job, int index,
                                        v1::NodeRole role) const {
  v1::Assignment a;
  a.set_job_id(job.status.job_id());
  *a.mutable_spec() = job.status.spec();
  *a.mutable_shard_map() = job.status.shard_map();
  a.set_index(index);
  a.set_num_workers(job.workers.size());
  *a.mutable_membership() = job.status.membership();
  if (job.status.membership_pending().version() != 0 &&
      (role == v1::WORKER || JoinersReady(job))) {
    *a.mutable_membership_pending() = job.status.membership_pending();
  }
  if (role == v1::SERVER && job.status.map_change().version() != 0 &&
      MapChangeAnnounced(job, index)) {
    *a.mutable_map_change() = job.status.map_change();
  }
  if (role == v1::SERVER) {
    if (const v1::ShardMapMove* rebuild = RebuildSourceOf(job.status, index)) {
      a.set_rebuild_from_data_dir(rebuild->rebuilt_from_data_dir());
      a.set_rebuild_map_version(rebuild->version());
      a.set_rebuild_from_hosted(rebuild->rebuilt_from_hosted());
      // Hosted beside the server's own place (Heartbeat lists it too).
      a.set_hosted(rebuild->rebuilt_onto_survivor());
    }
  }
  return a;
}

void JobManager::Tick(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (const auto& [node_id, node] : nodes_.ExpireLeases(now)) {
    metrics_->leases_expired.Increment();
    PS_LOG_WARNING("node ", node_id, " lost its lease (no heartbeat for ",
                   absl::FormatDuration(now - node.last_seen), ")");
    if (node.job_id.empty()) continue;
    Job& job = jobs_.at(node.job_id);
    Slot& slot =
        (node.role == v1::SERVER ? job.servers : job.workers).at(node.index);
    if (slot.node_id == node_id) {
      slot.node_id.clear();
      slot.vacant_since = now;
      slot.last_node_id = node_id;
      slot.last_address = node.address.empty() ? node.peer_host : node.address;
    }
    if (node.role == v1::SERVER) {
      VacateHostedPlaces(job, node_id, node.index, now);
    }
    PS_LOG_WARNING("job ", node.job_id, ": ", RoleName(node.role), " ",
                   node.index, " (", slot.last_address,
                   ") is vacant; waiting until ",
                   absl::FormatTime(now + timing_.recovery_grace),
                   " for it to come back or be replaced");
    if (PublishVacancies(job)) Changed(job);
  }
  UpdateGauges();
  Recover(now);
  Schedule(now);
}

bool JobManager::WorkerFits(const NodeRecord& node, const Job& job) {
  if (!node.only_job.empty() && node.only_job != job.status.job_id()) {
    return false;
  }
  if (node.model_digest.empty()) {
    return job.status.spec().model().kind() != v1::ModelSpec::EXTERNAL;
  }
  return node.model_digest == job.model_digest;
}

NodeRegistry::Filter JobManager::PlaceFilter(v1::NodeRole role,
                                             bool durable_only,
                                             const Job* fits) {
  NodeRegistry::Filter filter;
  filter.role = role;
  filter.durable_only = durable_only;
  if (fits != nullptr) {
    filter.accepts = [fits](const NodeRecord& node) {
      return WorkerFits(node, *fits);
    };
  }
  return filter;
}

}  // namespace ps

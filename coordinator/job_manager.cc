#include "coordinator/job_manager.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "coordinator/shard_planner.h"

namespace ps {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// Most EpochRecords a job keeps (JobProgress.epochs).
constexpr int kMaxEpochRecords = 1000;

// Appends worker 0's end-of-epoch report to `progress`'s epoch records, at
// `now_ms`. A repeated epoch (a replacement worker 0 redoing it) replaces the
// records from that epoch on; past kMaxEpochRecords the last one is replaced.
void RecordEpoch(const v1::ProgressReport& report, int64_t now_ms,
                 v1::JobProgress* progress) {
  auto* epochs = progress->mutable_epochs();
  while (!epochs->empty() &&
         epochs->Get(epochs->size() - 1).epoch() >= report.epoch()) {
    epochs->RemoveLast();
  }
  if (epochs->size() >= kMaxEpochRecords) epochs->RemoveLast();
  v1::EpochRecord* record = epochs->Add();
  record->set_epoch(report.epoch());
  record->set_end_time_ms(now_ms);
  record->set_test_accuracy(report.test_accuracy());
  record->set_loss(report.loss());
}

const char* RoleName(v1::NodeRole role) {
  return role == v1::SERVER ? "server" : "worker";
}

// "1 server", "2 servers".
std::string Count(int64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// ModelDigest of a spec's model ("" if it has no valid tensors: a stored
// spec was validated, so only a corrupt record has none).
std::string SpecModelDigest(const v1::JobSpec& spec) {
  auto tensors = ModelTensors(spec.model());
  return tensors.ok() ? ModelDigest(*tensors) : "";
}

}  // namespace

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED ||
         state == v1::CANCELLED;
}

JobManager::JobManager(JobTable* table, MembershipTiming timing,
                       CoordinatorMetrics* metrics, JobLimits limits)
    : table_(table), timing_(timing), metrics_(metrics), limits_(limits) {
  // Node ids carry a per-incarnation tag so that ids from before a restart
  // never alias new ones.
  absl::BitGen rng;
  next_node_ = int64_t{absl::Uniform<uint32_t>(rng)} << 20;
}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(
    JobTable* table, MembershipTiming timing, CoordinatorMetrics* metrics,
    JobLimits limits) {
  std::unique_ptr<JobManager> manager(
      new JobManager(table, timing, metrics, limits));
  PS_RETURN_IF_ERROR(manager->Load());
  return manager;
}

absl::Status JobManager::Load() {
  PS_ASSIGN_OR_RETURN(auto jobs, table_->LoadAll());
  absl::MutexLock lock(&mu_);
  for (v1::JobStatus& status : jobs) {
    Job& job = jobs_[status.job_id()];
    job.status = std::move(status);
    // A spec stored before one of today's defaults existed gets it here, so
    // that every assignment carries a complete spec (servers and workers read
    // it as given). Defaults never change a field that is set.
    ApplyJobSpecDefaults(job.status.mutable_spec());
    job.model_digest = SpecModelDigest(job.status.spec());
    if (job.status.state() == v1::RUNNING) {
      // Its nodes will register again; until then every place is vacant.
      const absl::Time now = absl::Now();
      Slot vacant;
      vacant.vacant_since = now;
      job.servers.assign(job.status.spec().num_servers(), vacant);
      job.workers.assign(job.status.spec().num_workers(), vacant);
      for (size_t i = 0;
           i < job.servers.size() &&
           static_cast<int>(i) < job.status.shard_map().servers_size();
           ++i) {
        job.servers[i].last_address = job.status.shard_map().servers(i);
      }
      PublishVacancies(job);
      job.reports.assign(job.workers.size(), v1::ProgressReport());
      for (auto& r : job.reports) r.set_test_accuracy(-1);
      PS_LOG_INFO("job ", job.status.job_id(),
                  " was running: waiting for its nodes to register again");
    }
  }
  UpdateGauges();
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobManager::Submit(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  PS_RETURN_IF_ERROR(ValidateSubmittedSpec(spec, limits_));
  {
    absl::MutexLock lock(&mu_);
    PS_RETURN_IF_ERROR(CheckJobCount());
  }
  v1::JobStatus status;
  *status.mutable_spec() = std::move(spec);
  status.set_state(v1::PENDING);
  status.set_create_time_ms(NowMs());
  status.mutable_progress()->set_total_epochs(status.spec().epochs());
  status.mutable_progress()->set_test_accuracy(-1);
  absl::MutexLock lock(&mu_);
  // Checked again: another Submit may have queued a job meanwhile.
  PS_RETURN_IF_ERROR(CheckJobCount());
  // The table hands out the id and stores the record in one write, so two
  // submits never share an id and an acknowledged id always has its record.
  PS_RETURN_IF_ERROR(table_->Create(&status));
  const std::string id = status.job_id();
  auto [it, inserted] = jobs_.try_emplace(id);
  if (!inserted) {
    return absl::InternalError(
        absl::StrCat("job table handed out id ", id, ", which is in use"));
  }
  Job& job = it->second;
  job.status = std::move(status);
  job.model_digest = SpecModelDigest(job.status.spec());
  PS_LOG_INFO("job ", id, " submitted: ", job.status.spec().name());
  Publish(job);  // The table has the record already (Create).
  Schedule(absl::Now());
  return id;
}

absl::Status JobManager::CheckJobCount() const {
  int active = 0;
  for (const auto& [id, job] : jobs_) {
    if (!IsTerminal(job.status.state())) ++active;
  }
  if (active >= limits_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("jobs: ", active,
                     " jobs are pending or running, the coordinator's "
                     "limit (--max_jobs); submit again once one has ended"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobStatus> JobManager::Get(const std::string& job_id) const {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  return it->second.status;
}

std::vector<v1::JobStatus> JobManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobStatus> out;
  for (const auto& [id, job] : jobs_) out.push_back(job.status);
  return out;
}

absl::StatusOr<v1::JobStatus> JobManager::Cancel(const std::string& job_id) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  Job& job = it->second;
  if (IsTerminal(job.status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already ended (",
                     v1::JobState_Name(job.status.state()), ")"));
  }
  Finish(job, v1::CANCELLED, "cancelled by a client");
  return job.status;
}

absl::StatusOr<int64_t> JobManager::Watch(const std::string& job_id,
                                          Watcher watcher) {
  PS_RETURN_IF_ERROR(ValidateId("job_id", job_id));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  watcher(it->second.status);
  const int64_t token = next_watch_token_++;
  watchers_[token] = {job_id, std::move(watcher)};
  return token;
}

void JobManager::Unwatch(int64_t token) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(token);
}

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
    if (auto s = AdmitServer(request, peer_host, now); !s.ok()) {
      PS_LOG_WARNING("refused a server's registration from ",
                     peer_host.empty() ? "an unknown host" : peer_host, ": ",
                     s.message());
      return s;
    }
  }
  const std::string id =
      absl::StrFormat("%s-%x", RoleName(request.role()), next_node_++);
  Node& node = nodes_[id];
  node.role = request.role();
  node.address = request.address();
  node.peer_host = peer_host;
  node.durable = request.durable();
  node.storage_id = request.storage_id();
  node.model_digest = request.model_digest();
  node.only_job = request.job_id();
  node.last_seen = now;
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
          !node.job_id.empty() || !WorkerFits(node, it->second)) {
        continue;
      }
      Job& job = it->second;
      const std::string& holder = job.workers[i].node_id;
      if (holder.empty() || !nodes_.contains(holder)) {
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
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job_id: no job \"", request.job_id(), "\""));
  }
  const Job& job = it->second;
  if (IsTerminal(job.status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job_id: job ", request.job_id(), " already ended (",
                     v1::JobState_Name(job.status.state()), ")"));
  }
  Node node;
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
  return absl::InvalidArgumentError(
      absl::StrCat("model_digest: the worker's model (", request.model_digest(),
                   ") does not match job ", request.job_id(), "'s (",
                   job.model_digest, "); the job's tensors:", tensors));
}

absl::Status JobManager::AdmitServer(const v1::RegisterRequest& request,
                                     const std::string& peer_host,
                                     absl::Time now) {
  const std::string host = HostOf(request.address());
  if (IsLoopbackHost(host) && !peer_host.empty() &&
      !IsLoopbackHost(peer_host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: the server advertises ", request.address(),
                     ", a loopback address, but registers from ", peer_host,
                     ": no other host can reach it there; start it with "
                     "--advertise_host set to an address the workers reach"));
  }
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
    const Node& other = it->second;
    if (other.role != v1::SERVER || other.address != request.address()) {
      continue;
    }
    const bool same_storage = !request.storage_id().empty() &&
                              other.storage_id == request.storage_id();
    if (same_storage || now - other.last_seen > timing_.lease) {
      // The same server again (a restart on its data directory, or a retried
      // Register), or a dead one: the new registration replaces it.
      PS_LOG_INFO("server at ", request.address(), " registers again; node ",
                  it->first, " is replaced");
      for (auto& [job_id, job] : jobs_) {
        for (Slot& slot : job.servers) {
          if (slot.node_id == it->first) {
            slot.last_node_id = it->first;
            slot.last_address = other.address;
            slot.node_id.clear();
            slot.vacant_since = now;
          }
        }
      }
      nodes_.erase(it);
      return absl::OkStatus();
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "address: ", request.address(), " is already registered by server ",
        it->first, " (last heartbeat ",
        absl::FormatDuration(now - other.last_seen),
        " ago, other storage); every server needs an address of its own "
        "(--advertise_host, --listen). A server restarted without its data "
        "directory gets the address once the old lease expires (",
        absl::FormatDuration(timing_.lease), ")"));
  }
  return absl::OkStatus();
}

void JobManager::ReturnServerPlaces(const std::string& node_id,
                                    const v1::RegisterRequest& request) {
  const Node& node = nodes_.at(node_id);
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
      if (!holds && had_shards) {
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
      Attach(job, v1::SERVER, i, node_id);
      job.servers[i].has_shards = holds;
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
  auto it = nodes_.find(request.node_id());
  if (it == nodes_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "node_id: unknown node \"", request.node_id(), "\"; register again"));
  }
  Node& node = it->second;
  node.last_seen = absl::Now();
  v1::HeartbeatResponse response;
  if (!node.job_id.empty()) {
    Job& job = jobs_.at(node.job_id);
    if (node.role == v1::SERVER) {
      for (const v1::HeldAssignment& held : request.held()) {
        if (held.job_id() == node.job_id)
          job.servers[node.index].has_shards = true;
      }
    }
    *response.add_assignments() = AssignmentOf(job, node.index);
  }
  return response;
}

v1::Assignment JobManager::AssignmentOf(const Job& job, int index) const {
  v1::Assignment a;
  a.set_job_id(job.status.job_id());
  *a.mutable_spec() = job.status.spec();
  *a.mutable_shard_map() = job.status.shard_map();
  a.set_index(index);
  a.set_num_workers(job.workers.size());
  return a;
}

absl::StatusOr<v1::ProgressResponse> JobManager::ReportProgress(
    const v1::ProgressReport& report) {
  PS_RETURN_IF_ERROR(ValidateProgressReport(report));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(report.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job_id: no job \"", report.job_id(), "\""));
  }
  Job& job = it->second;
  v1::ProgressResponse response;
  if (job.status.state() != v1::RUNNING) {
    response.set_stop(true);
    return response;
  }
  const int w = report.worker_index();
  if (w < 0 || w >= static_cast<int>(job.workers.size()) ||
      job.workers[w].node_id != report.node_id()) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker_index: node ", report.node_id(), " is not worker ",
                     w, " of ", report.job_id()));
  }
  if (!report.error().empty()) {
    Finish(job, v1::FAILED, absl::StrCat("worker ", w, ": ", report.error()));
    response.set_stop(true);
    return response;
  }
  // Keep the latest accuracy even when this report carries none.
  v1::ProgressReport& latest = job.reports[w];
  const float accuracy = report.test_accuracy() >= 0 ? report.test_accuracy()
                                                     : latest.test_accuracy();
  latest = report;
  latest.set_test_accuracy(accuracy);
  Aggregate(job);
  // Worker 0 evaluates after each epoch: its report with an accuracy ends one.
  if (w == 0 && report.test_accuracy() >= 0) {
    RecordEpoch(report, NowMs(), job.status.mutable_progress());
  }
  const bool all_finished =
      std::all_of(job.reports.begin(), job.reports.end(),
                  [](const v1::ProgressReport& r) { return r.finished(); });
  if (all_finished) {
    Finish(job, v1::SUCCEEDED, "");
  } else {
    Changed(job);
  }
  return response;
}

void JobManager::Aggregate(Job& job) {
  v1::JobProgress* p = job.status.mutable_progress();
  int32_t epoch = INT32_MAX;
  int64_t clock = INT64_MAX;
  double loss = 0, rate = 0;
  int reported = 0;
  for (const v1::ProgressReport& r : job.reports) {
    epoch = std::min(epoch, r.epoch());
    clock = std::min(clock, r.clock());
    if (r.node_id().empty()) continue;  // No report from this worker yet.
    ++reported;
    loss += r.loss();
    rate += r.samples_per_second();
  }
  p->set_epoch(epoch);
  p->set_clock(clock);
  p->set_loss(reported > 0 ? loss / reported : 0);
  p->set_samples_per_second(rate);
  p->set_total_clocks(job.reports[0].total_clocks());
  // Worker 0 evaluates the model on the test set after each epoch.
  const v1::ProgressReport& evaluator = job.reports[0];
  if (evaluator.test_accuracy() >= 0) {
    p->set_test_accuracy(evaluator.test_accuracy());
    p->set_accuracy_epoch(evaluator.epoch());
  }
}

void JobManager::Tick(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node& node = it->second;
    if (now - node.last_seen <= timing_.lease) {
      ++it;
      continue;
    }
    metrics_->leases_expired.Increment();
    PS_LOG_WARNING("node ", it->first, " lost its lease (no heartbeat for ",
                   absl::FormatDuration(now - node.last_seen), ")");
    if (!node.job_id.empty()) {
      Job& job = jobs_.at(node.job_id);
      Slot& slot =
          (node.role == v1::SERVER ? job.servers : job.workers).at(node.index);
      if (slot.node_id == it->first) {
        slot.node_id.clear();
        slot.vacant_since = now;
        slot.last_node_id = it->first;
        slot.last_address =
            node.address.empty() ? node.peer_host : node.address;
      }
      PS_LOG_WARNING("job ", node.job_id, ": ", RoleName(node.role), " ",
                     node.index, " (", slot.last_address,
                     ") is vacant; waiting until ",
                     absl::FormatTime(now + timing_.recovery_grace),
                     " for it to come back or be replaced");
      if (PublishVacancies(job)) Changed(job);
    }
    it = nodes_.erase(it);
  }
  UpdateGauges();
  Recover(now);
  Schedule(now);
}

bool JobManager::WorkerFits(const Node& node, const Job& job) {
  if (!node.only_job.empty() && node.only_job != job.status.job_id()) {
    return false;
  }
  if (node.model_digest.empty()) {
    return job.status.spec().model().kind() != v1::ModelSpec::EXTERNAL;
  }
  return node.model_digest == job.model_digest;
}

std::vector<std::string> JobManager::FreeNodes(v1::NodeRole role,
                                               absl::Time now,
                                               bool durable_only,
                                               const Job* fits) const {
  std::vector<std::string> free;
  for (const auto& [node_id, node] : nodes_) {
    if (node.role == role && node.job_id.empty() &&
        (!durable_only || node.durable) &&
        (fits == nullptr || WorkerFits(node, *fits)) &&
        now - node.last_seen <= timing_.lease) {
      free.push_back(node_id);
    }
  }
  return free;
}

int JobManager::LiveNodes(v1::NodeRole role, absl::Time now, bool durable_only,
                          const Job* fits) const {
  int live = 0;
  for (const auto& [node_id, node] : nodes_) {
    if (node.role == role && (!durable_only || node.durable) &&
        (fits == nullptr || WorkerFits(node, *fits)) &&
        now - node.last_seen <= timing_.lease) {
      ++live;
    }
  }
  return live;
}

void JobManager::Attach(Job& job, v1::NodeRole role, int index,
                        const std::string& node_id) {
  Slot& slot = (role == v1::SERVER ? job.servers : job.workers)[index];
  if (!slot.node_id.empty() && slot.node_id != node_id) {
    // The previous holder is gone (same address, or its place was vacant).
    auto old = nodes_.find(slot.node_id);
    if (old != nodes_.end()) {
      old->second.job_id.clear();
      old->second.index = -1;
    }
  }
  const bool recovered = slot.vacant_since != absl::InfiniteFuture();
  slot = Slot();  // Held from now on (vacant_since: never).
  slot.node_id = node_id;
  Node& node = nodes_.at(node_id);
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
        FreeNodes(v1::WORKER, now, /*durable_only=*/false, &job);
    for (size_t i = 0; i < job.workers.size() && !free.empty(); ++i) {
      if (!job.workers[i].node_id.empty()) continue;
      Attach(job, v1::WORKER, i, free.front());
      free.erase(free.begin());
    }
    if (PublishVacancies(job)) Changed(job);
    for (const auto& [slots, role] :
         {std::pair{&job.servers, v1::SERVER}, {&job.workers, v1::WORKER}}) {
      for (size_t i = 0; i < slots->size(); ++i) {
        const Slot& slot = (*slots)[i];
        if (slot.node_id.empty() &&
            now - slot.vacant_since > timing_.recovery_grace) {
          Finish(
              job, v1::FAILED,
              absl::StrCat(RoleName(role), " ", i, " (",
                           slot.last_address.empty() ? "address unknown"
                                                     : slot.last_address,
                           ") was lost and not ",
                           role == v1::SERVER ? "back" : "replaced", " within ",
                           absl::FormatDuration(timing_.recovery_grace)));
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
    const bool durable = spec.durability() != v1::MEMORY;
    const int servers_registered = LiveNodes(v1::SERVER, now, durable);
    const int workers_registered =
        LiveNodes(v1::WORKER, now, /*durable_only=*/false, &job);
    std::vector<std::string> missing;
    if (servers_registered < spec.num_servers()) {
      std::string servers = Count(spec.num_servers(), "server");
      if (durable) {
        const v1::Durability durability =
            spec.durability() == v1::DURABILITY_UNSPECIFIED ? v1::WAL
                                                            : spec.durability();
        absl::StrAppend(&servers, " with a data directory (durability ",
                        v1::Durability_Name(durability), "), ",
                        servers_registered, " registered (",
                        Count(LiveNodes(v1::SERVER, now), "server"),
                        " in all)");
      } else {
        absl::StrAppend(&servers, ", ", servers_registered, " registered");
      }
      missing.push_back(std::move(servers));
    }
    if (workers_registered < spec.num_workers()) {
      if (spec.model().kind() == v1::ModelSpec::EXTERNAL) {
        // Only Python workers whose module matches count (WorkerFits).
        missing.push_back(absl::StrCat(
            Count(spec.num_workers(), "Python worker"), " with model ",
            job.model_digest, ", ", workers_registered, " registered"));
      } else {
        missing.push_back(absl::StrCat(Count(spec.num_workers(), "worker"),
                                       ", ", workers_registered,
                                       " registered"));
      }
    }
    if (!missing.empty()) {
      SetPendingMessage(
          job, absl::StrCat("waiting for ", absl::StrJoin(missing, " and ")));
      continue;
    }
    if (!blocker.empty()) {
      SetPendingMessage(job, absl::StrCat("queued behind ", blocker,
                                          ", which waits for busy nodes"));
      continue;
    }
    std::vector<std::string> servers = FreeNodes(v1::SERVER, now, durable);
    std::vector<std::string> workers =
        FreeNodes(v1::WORKER, now, /*durable_only=*/false, &job);
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
    std::vector<std::string> addresses;
    for (const std::string& s : servers) addresses.push_back(nodes_[s].address);
    auto map = PlanShards(spec, addresses, /*version=*/1);
    if (!map.ok()) {
      Finish(job, v1::FAILED, std::string(map.status().message()));
      continue;
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
    job.reports.assign(workers.size(), v1::ProgressReport());
    for (auto& r : job.reports) r.set_test_accuracy(-1);
    job.status.set_state(v1::RUNNING);
    job.status.clear_message();
    job.status.set_start_time_ms(NowMs());
    PS_LOG_INFO("job ", id, " running on ", servers.size(), " servers and ",
                workers.size(), " workers");
    Changed(job);
  }
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
      if (!slot.node_id.empty()) continue;
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

void JobManager::Finish(Job& job, v1::JobState state,
                        const std::string& message) {
  job.status.set_state(state);
  job.status.set_message(message);
  job.status.set_end_time_ms(NowMs());
  job.status.clear_vacant();
  for (const auto* slots : {&job.servers, &job.workers}) {
    for (const Slot& slot : *slots) {
      auto it = nodes_.find(slot.node_id);
      if (it != nodes_.end() && it->second.job_id == job.status.job_id()) {
        it->second.job_id.clear();
        it->second.index = -1;
      }
    }
  }
  metrics_->finished(state).Increment();
  PS_LOG_INFO("job ", job.status.job_id(), " ", v1::JobState_Name(state),
              message.empty() ? "" : ": ", message);
  Changed(job);
}

void JobManager::Changed(Job& job) {
  if (auto s = table_->Put(job.status); !s.ok()) {
    PS_LOG_ERROR("job table: ", s.message());
  }
  Publish(job);
}

void JobManager::Publish(const Job& job) {
  for (const auto& [token, watch] : watchers_) {
    if (watch.first == job.status.job_id()) watch.second(job.status);
  }
  UpdateGauges();
}

void JobManager::UpdateGauges() {
  std::map<v1::JobState, int> counts;
  for (const auto& [id, job] : jobs_) ++counts[job.status.state()];
  for (v1::JobState s :
       {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    metrics_->jobs(s).Set(counts[s]);
  }
  int servers = 0, workers = 0;
  for (const auto& [id, node] : nodes_)
    (node.role == v1::SERVER ? servers : workers)++;
  metrics_->nodes("server").Set(servers);
  metrics_->nodes("worker").Set(workers);
  std::map<std::string, int> vacant;
  int64_t first_deadline_ms = 0;
  for (const auto& [id, job] : jobs_) {
    for (const v1::VacantPlace& place : job.status.vacant()) {
      ++vacant[place.role()];
      if (place.deadline_ms() > 0 &&
          (first_deadline_ms == 0 || place.deadline_ms() < first_deadline_ms)) {
        first_deadline_ms = place.deadline_ms();
      }
    }
  }
  metrics_->vacant_places("server").Set(vacant["server"]);
  metrics_->vacant_places("worker").Set(vacant["worker"]);
  metrics_->recovery_deadline.Set(first_deadline_ms / 1000.0);
}

}  // namespace ps

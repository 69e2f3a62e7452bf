#include "server/parameter_server.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "server/memory_shard_store.h"
#include "server/peer_fetch.h"
#include "server/rebuild_import.h"
#include "server/rocksdb_shard_store.h"

namespace ps {

ParameterServer::ParameterServer(ParameterServerOptions options)
    : options_(std::move(options)),
      registry_(std::make_shared<prometheus::Registry>()),
      metrics_(std::make_unique<ServerMetrics>(*registry_)),
      rpc_metrics_(std::make_unique<RpcMetrics>(*registry_)) {}

ParameterServer::~ParameterServer() { Stop(); }

std::string ParameterServer::address() const {
  return absl::StrCat(options_.advertise_host, ":", port_);
}

absl::Status ParameterServer::Start() {
  if (!options_.shared_data_root.empty()) {
    PS_ASSIGN_OR_RETURN(
        SharedDataDir shared,
        ResolveSharedDataDir(options_.shared_data_root, options_.data_dir));
    shared_data_root_ = shared.root;
    shared_data_dir_ = shared.data_dir;
  }
  auto credentials = Credentials::Load(options_.security);
  if (!credentials.ok()) return credentials.status();
  auto server_credentials = credentials->ServerCredentials();
  if (!server_credentials.ok()) return server_credentials.status();
  auto storage_id = OpenStore();
  if (!storage_id.ok()) return storage_id.status();
  ServerJobOptions job_options = options_.job_options;
  if (job_options.sparse_memory_bytes > 0) {
    sparse_budget_ =
        std::make_unique<SparseMemoryBudget>(job_options.sparse_memory_bytes);
    job_options.sparse_budget = sparse_budget_.get();
    if (job_options.sparse_tier_dir.empty() && !options_.data_dir.empty()) {
      job_options.sparse_tier_dir = options_.data_dir + "/sparse-tier";
    }
  }
  manager_ = std::make_unique<ParameterManager>(store_.get(), metrics_.get(),
                                                job_options);
  // Server moves: units are copied from the other servers of a job.
  manager_->SetRemoteFetch(MakePeerFetch(credentials->MemberChannel()));
  // A lost server's place rebuilt here: its directory opened as its own
  // restart would (and only while no process holds it).
  manager_->SetLostStoreOpener(OpenLostStore);
  service_ = std::make_unique<ParameterServiceImpl>(
      manager_.get(), rpc_metrics_.get(), push_faults_,
      Authorizer(credentials->MemberChecks()), options_.shared_payloads);
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder, options_.limits, options_.reflection);
  builder.AddListeningPort(options_.listen_address, *server_credentials,
                           &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "parameter server: cannot listen on ", options_.listen_address));
  }
  SetServicesServing(server_.get(),
                     {v1::ParameterService::service_full_name()});
  if (!options_.metrics_address.empty()) {
    auto exposer = MetricsExposer::Start(options_.metrics_address, registry_);
    if (!exposer.ok()) return exposer.status();
    exposer_ = *std::move(exposer);
  }
  if (!options_.coordinator.empty()) {
    StartMembership(credentials->MemberChannel(), *storage_id);
  }
  if (IsWildcardHost(HostOf(options_.listen_address)) &&
      IsLoopbackHost(options_.advertise_host)) {
    PS_LOG_WARNING(
        "parameter server listens on all interfaces (", options_.listen_address,
        ") but advertises ", address(),
        ", a loopback address: workers on other hosts cannot reach it; set "
        "--advertise_host to an address they reach");
  }
  PS_LOG_INFO("parameter server bound to ", options_.listen_address, " (port ",
              port_, "), advertised as ", address(),
              credentials->tls() ? " with TLS" : "",
              options_.data_dir.empty()
                  ? " (in-memory store)"
                  : absl::StrCat(" (RocksDB at ", options_.data_dir, ")"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParameterServer::OpenStore() {
  if (options_.data_dir.empty()) {
    store_ = MemoryShardStore::Create();
    // A fresh identity per process: a restart comes back without the shards.
    absl::BitGen rng;
    return absl::StrFormat("memory-%016x%016x", absl::Uniform<uint64_t>(rng),
                           absl::Uniform<uint64_t>(rng));
  }
  RocksDbShardStoreOptions store_options;
  store_options.path = options_.data_dir;
  store_options.rows_file_bytes = options_.snapshot_rows_file_bytes;
  auto store = RocksDbShardStore::Open(store_options);
  if (!store.ok()) return store.status();
  auto identity = (*store)->Identity();
  if (!identity.ok()) return identity.status();
  store_ = *std::move(store);
  return identity;
}

void ParameterServer::StartMembership(ChannelSecurity channel,
                                      const std::string& storage_id) {
  MembershipOptions membership;
  membership.coordinator = options_.coordinator;
  membership.role = v1::SERVER;
  membership.address = address();
  membership.channel = std::move(channel);
  membership.durable = !options_.data_dir.empty();
  membership.storage_id = storage_id;
  membership.shared_data_root = shared_data_root_;
  membership.data_dir = shared_data_dir_;
  membership.held_in_heartbeats = true;
  loader_ = std::make_unique<AssignmentLoader>(manager_.get());
  membership_ = std::make_unique<Membership>(
      membership,
      // Opened on the loader's thread: the heartbeats go on meanwhile.
      [this](const std::vector<v1::Assignment>& assignments) {
        loader_->Offer(assignments);
      },
      [this] { return HeldJobs(); },
      // The coordinator says which stored jobs ended: their shards are
      // deleted (after a SUCCEEDED job's model is stored).
      [this](const std::vector<std::string>& ended) {
        manager_->DeleteEndedJobs(ended);
      });
  membership_->Start();
}

std::vector<v1::HeldAssignment> ParameterServer::HeldJobs() {
  std::vector<v1::HeldAssignment> held;
  auto jobs = manager_->StoredJobs();
  if (!jobs.ok()) {
    PS_LOG_ERROR("cannot list the stored jobs: ", jobs.status().message());
    return held;
  }
  for (const std::string& id : *jobs) held.emplace_back().set_job_id(id);
  // Elastic jobs' membership changes in progress (a MEMORY job is not
  // stored, so it may be listed only here).
  for (v1::HeldAssignment& report : manager_->MembershipReports()) {
    auto same = std::find_if(held.begin(), held.end(), [&](const auto& h) {
      return h.job_id() == report.job_id();
    });
    if (same != held.end()) {
      *same = std::move(report);
    } else {
      held.push_back(std::move(report));
    }
  }
  // Server moves in progress (ParameterManager::MoveReports).
  for (const v1::HeldAssignment& report : manager_->MoveReports()) {
    auto same = std::find_if(held.begin(), held.end(), [&](const auto& h) {
      return h.job_id() == report.job_id();
    });
    v1::HeldAssignment& entry =
        same != held.end() ? *same : held.emplace_back();
    entry.set_job_id(report.job_id());
    entry.set_map_change_version(report.map_change_version());
    entry.set_map_frontier_clock(report.map_frontier_clock());
    entry.set_map_staged_version(report.map_staged_version());
  }
  return held;
}

void ParameterServer::Stop() {
  if (stopped_ || server_ == nullptr) return;
  stopped_ = true;
  // Health checks (a Kubernetes readiness probe) see the stop at once.
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  if (membership_) membership_->Stop();
  if (loader_) loader_->Stop();
  // The calls the jobs hold (pulls waiting for their clock, BSP pushes
  // waiting for the other workers') are answered UNAVAILABLE first, which
  // workers retry, here or at this server restarted; left to Shutdown's
  // deadline they would end CANCELLED.
  manager_->Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  server_->Wait();
  store_.reset();
}

}  // namespace ps

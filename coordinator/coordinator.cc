#include "coordinator/coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/request_validation.h"

namespace ps {

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      registry_(std::make_shared<prometheus::Registry>()),
      metrics_(std::make_unique<CoordinatorMetrics>(*registry_)),
      rpc_metrics_(std::make_unique<RpcMetrics>(*registry_)) {}

Coordinator::~Coordinator() { Stop(); }

absl::Status Coordinator::Start() {
  if (options_.data_dir.empty()) {
    return absl::InvalidArgumentError("coordinator: data_dir is required");
  }
  PS_ASSIGN_OR_RETURN(auto credentials, Credentials::Load(options_.security));
  PS_ASSIGN_OR_RETURN(auto server_credentials, credentials.ServerCredentials());
  AuthorizerOptions job_api;
  if (!options_.auth_token_file.empty()) {
    PS_ASSIGN_OR_RETURN(auto tokens, ReadTokenFile(options_.auth_token_file));
    job_api.job_tokens = std::move(tokens);
    job_api.allow_unauthenticated_reads = options_.allow_unauthenticated_reads;
  }
  PS_ASSIGN_OR_RETURN(auto table,
                      JobTable::Open(options_.data_dir, options_.table));
  table_ = std::move(table);
  PS_ASSIGN_OR_RETURN(auto manager,
                      JobManager::Create(table_.get(), options_.timing,
                                         metrics_.get(), options_.job_limits));
  manager_ = std::move(manager);
  PS_ASSIGN_OR_RETURN(
      auto sweeps, SweepManager::Create(table_.get(), manager_.get(),
                                        metrics_.get(), options_.job_limits));
  sweeps_ = std::move(sweeps);
  // Sweeps are the job API too: the same tokens.
  sweep_service_ = std::make_unique<SweepServiceImpl>(
      sweeps_.get(), rpc_metrics_.get(), Authorizer(job_api));
  job_service_ = std::make_unique<JobServiceImpl>(
      manager_.get(), rpc_metrics_.get(), Authorizer(std::move(job_api)));
  const int64_t max_upload_bytes =
      MaxUploadModelRequestBytes(options_.job_limits);
  cluster_service_ = std::make_unique<ClusterServiceImpl>(
      manager_.get(), rpc_metrics_.get(),
      Authorizer(credentials.MemberChecks()), max_upload_bytes);

  // gRPC's receive limit is per server: it is that of the largest request any
  // method takes (UploadModel's), and each method refuses more than its own
  // limit before parsing (FinishRawUnary, docs/security.md).
  ServerLimits limits = options_.server_limits;
  limits.max_receive_message_bytes = static_cast<int>(std::min<int64_t>(
      limits.max_receive_message_bytes,
      std::max<int64_t>(max_upload_bytes, kMaxSubmitJobRequestBytes)));
  if (limits.memory_quota_bytes == 0) {
    limits.memory_quota_bytes =
        int64_t{limits.max_receive_message_bytes} + (int64_t{64} << 20);
  }
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder, limits, options_.reflection);
  builder.AddListeningPort(options_.listen_address, server_credentials, &port_);
  builder.RegisterService(job_service_.get());
  builder.RegisterService(sweep_service_.get());
  builder.RegisterService(cluster_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("coordinator: cannot listen on ",
                                               options_.listen_address));
  }
  SetServicesServing(server_.get(), {v1::JobService::service_full_name(),
                                     v1::SweepService::service_full_name(),
                                     v1::ClusterService::service_full_name()});
  if (!options_.metrics_address.empty()) {
    PS_ASSIGN_OR_RETURN(auto exposer, MetricsExposer::Start(
                                          options_.metrics_address, registry_));
    exposer_ = std::move(exposer);
  }
  ticker_ = std::thread([this] { TickLoop(); });
  PS_LOG_INFO("coordinator listening on port ", port_,
              credentials.tls() ? " with TLS" : "", ", job table at ",
              options_.data_dir,
              options_.auth_token_file.empty() ? ", job API open"
              : options_.allow_unauthenticated_reads
                  ? ", job API changes need a token"
                  : ", job API needs a token");
  return absl::OkStatus();
}

void Coordinator::TickLoop() {
  absl::MutexLock lock(&mu_);
  absl::Time last_retention = absl::InfinitePast();
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                               options_.tick_interval)) {
    mu_.Unlock();
    const absl::Time now = absl::Now();
    manager_->Tick(now);
    sweeps_->Tick(now);
    ReportStoreHealth();
    if (now - last_retention >= absl::Seconds(1)) {
      manager_->ApplyRetention(now, options_.retention);
      last_retention = now;
    }
    mu_.Lock();
  }
}

void Coordinator::ReportStoreHealth() {
  if (store_failed_ || !manager_->store_failed()) return;
  store_failed_ = true;
  // Memory and the job table may now differ: load balancers and probes
  // should stop sending work here until an operator restarts it.
  if (grpc::HealthCheckServiceInterface* health =
          server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
  PS_LOG_ERROR(
      "coordinator: the job table failed a write; reporting NOT_SERVING "
      "until restarted (fix the data directory's disk, then restart)");
}

void Coordinator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (ticker_.joinable()) ticker_.join();
  if (server_) {
    // Watch streams end when their deadline is reached; do not wait long for
    // them.
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    server_->Wait();
  }
}

}  // namespace ps

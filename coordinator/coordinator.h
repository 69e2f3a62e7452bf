// The coordinator process's parts wired together: job table, JobManager,
// SweepManager, the gRPC server (JobService, SweepService, ClusterService,
// health), metrics, and the ticker that expires leases, schedules jobs and
// advances sweeps.
#ifndef PS_COORDINATOR_COORDINATOR_H_
#define PS_COORDINATOR_COORDINATOR_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "common/security.h"
#include "coordinator/cluster_service.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_service.h"
#include "coordinator/sweep/sweep_manager.h"
#include "coordinator/sweep/sweep_service.h"
#include "grpcpp/grpcpp.h"

namespace ps {

struct CoordinatorOptions {
  // gRPC listen address; port 0 picks a free port.
  std::string listen_address = "127.0.0.1:0";
  // RocksDB directory of the job table. Required.
  std::string data_dir;
  // How the job table is opened (its RocksDB environment, statistics).
  // Default: JobTableOptions' defaults.
  JobTableOptions table;
  // Prometheus listen address; empty: no HTTP endpoint.
  std::string metrics_address;
  // Leases and heartbeat interval given to nodes.
  MembershipTiming timing;
  // How often leases are checked and pending jobs scheduled.
  absl::Duration tick_interval = absl::Milliseconds(100);
  // TLS and the cluster secret ClusterService requires (docs/security.md).
  // Default: plaintext, no secret, and ClusterService open.
  SecurityOptions security;
  // File of bearer tokens the job API (JobService) accepts, one per line
  // (ReadTokenFile). Default: empty, and the job API is open.
  std::string auth_token_file;
  // With auth_token_file: GetJob, ListJobs and WatchJob need no token.
  // Default false.
  bool allow_unauthenticated_reads = false;
  // What SubmitJob admits (jobs pending or running, model size).
  JobLimits job_limits;
  // Transport limits of the gRPC server (message size, streams per
  // connection). Default: ServerLimits' defaults. The server receives no
  // message larger than the largest request a method takes
  // (MaxUploadModelRequestBytes(job_limits)), nor than
  // server_limits.max_receive_message_bytes if that is smaller; each method
  // has its own, smaller limit (request_validation.h).
  // server_limits.memory_quota_bytes 0 (the default) means that limit plus
  // 64 MiB: one largest request in flight and room for everything else.
  ServerLimits server_limits;
  // Serve gRPC server reflection. Default true.
  bool reflection = true;
  // What is kept of ended jobs (records, trained models), applied about once
  // a second. Default: JobRetention's defaults.
  JobRetention retention;
};

// Start() then Stop(); not restartable.
class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();

  // Opens the job table and starts serving. Errors: the security files'
  // (Credentials::Load, ReadTokenFile), the table's (bad data_dir),
  // UNAVAILABLE if a port cannot be bound.
  absl::Status Start();
  void Stop();

  int port() const { return port_; }
  int metrics_port() const { return exposer_ ? exposer_->port() : 0; }
  JobManager* manager() { return manager_.get(); }
  SweepManager* sweeps() { return sweeps_.get(); }

 private:
  void TickLoop();
  // Once the job table failed a write (JobManager::store_failed), sets every
  // service NOT_SERVING on the health service. Ticker thread only.
  void ReportStoreHealth();

  const CoordinatorOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<RpcMetrics> rpc_metrics_;
  std::unique_ptr<MetricsExposer> exposer_;
  std::unique_ptr<JobTable> table_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<SweepManager> sweeps_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<SweepServiceImpl> sweep_service_;
  std::unique_ptr<ClusterServiceImpl> cluster_service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread ticker_;
  int port_ = 0;
  bool store_failed_ = false;  // Reported NOT_SERVING (ticker thread only).

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // PS_COORDINATOR_COORDINATOR_H_

// A worker process's parts wired together: membership, metrics, the compute
// backend, and one Trainer thread for the job the coordinator assigns.
#ifndef PS_WORKER_WORKER_NODE_H_
#define PS_WORKER_WORKER_NODE_H_

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/authorizer.h"
#include "common/grpc_util.h"
#include "common/membership.h"
#include "common/metrics.h"
#include "common/security.h"
#include "ps/v1/cluster.grpc.pb.h"
#include "worker/model/backend.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace ps {

struct WorkerNodeOptions {
  // Coordinator address, host:port. Required.
  std::string coordinator;
  // Prometheus listen address; empty: no HTTP endpoint.
  std::string metrics_address;
  // gRPC listen address of the worker's health service; port 0 picks one.
  std::string listen_address = "127.0.0.1:0";
  TrainerOptions trainer;
  // TLS and the cluster secret, for the node's own server and its calls to
  // the coordinator and the servers (docs/security.md). Default: plaintext,
  // no secret. It replaces trainer.parameter_client.channel.
  SecurityOptions security;
  // Transport limits of the node's gRPC server. Default: ServerLimits', but
  // requests of at most 64 KiB: the node serves only WorkerService's status,
  // health and reflection, whose requests are a few bytes.
  ServerLimits limits{.max_receive_message_bytes = 64 * 1024};
  // Serve gRPC server reflection. Default true.
  bool reflection = true;
};

// Start() then Stop(); not restartable. Thread-safe.
class WorkerNode final : public v1::WorkerService::CallbackService {
 public:
  // `backend` must outlive the node.
  WorkerNode(WorkerNodeOptions options, std::unique_ptr<Backend> backend);
  ~WorkerNode();

  // Starts metrics and membership. Errors: the security files'
  // (Credentials::Load), UNAVAILABLE for an unusable port.
  absl::Status Start();
  // Stops the current trainer and leaves the cluster.
  void Stop();

  int metrics_port() const { return exposer_ ? exposer_->port() : 0; }
  // The bound port of the health service.
  int port() const { return port_; }

  // WorkerService: the node's id, backend and current job. Members only
  // (UNAUTHENTICATED otherwise).
  grpc::ServerUnaryReactor* GetWorkerStatus(
      grpc::CallbackServerContext* ctx, const v1::WorkerStatusRequest* request,
      v1::WorkerStatus* response) override;

 private:
  // Called on the heartbeat thread: never blocks on a trainer.
  void OnAssignments(const std::vector<v1::Assignment>& assignments);
  // Asks the current trainer to stop (Trainer::Stop: its calls in flight are
  // cancelled) and moves it and its thread to retired_, without waiting.
  void StopTrainer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerNodeOptions options_;
  const std::unique_ptr<Backend> backend_;
  // options_.trainer with the channel security loaded at Start.
  TrainerOptions trainer_options_;
  Authorizer authorizer_;  // Set at Start.
  std::shared_ptr<prometheus::Registry> registry_;
  WorkerMetrics metrics_;
  std::unique_ptr<MetricsExposer> exposer_;
  // The trainers' progress reports and model uploads to the coordinator, on
  // a connection apart from membership_'s heartbeats.
  std::unique_ptr<v1::ClusterService::Stub> reports_stub_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<grpc::Server> server_;  // WorkerService and health.
  int port_ = 0;

  absl::Mutex mu_;
  std::string current_job_ ABSL_GUARDED_BY(mu_);
  int current_index_ ABSL_GUARDED_BY(mu_) = -1;
  std::unique_ptr<Trainer> trainer_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
  // Stopped trainers and their threads, not yet joined. The next trainer's
  // thread joins (and destroys) them before it starts training, so trainers
  // never share the backend and no lock holder or heartbeat waits for one;
  // Stop() joins those left.
  struct Retired {
    std::unique_ptr<Trainer> trainer;
    std::thread thread;
  };
  std::vector<Retired> retired_ ABSL_GUARDED_BY(mu_);
  // Places ("job/index") this node has run: never started twice, even while
  // the coordinator still lists one it has finished.
  std::set<std::string> done_jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_WORKER_NODE_H_

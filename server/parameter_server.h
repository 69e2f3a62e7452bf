// A parameter server process's parts wired together: shard store, manager, the
// gRPC server (ParameterService + health), metrics and cluster membership.
#ifndef PS_SERVER_PARAMETER_SERVER_H_
#define PS_SERVER_PARAMETER_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/grpc_util.h"
#include "common/membership.h"
#include "common/metrics.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"
#include "server/assignment_loader.h"
#include "server/parameter_manager.h"
#include "server/parameter_service.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"

namespace ps {

struct ParameterServerOptions {
  // gRPC listen address; port 0 picks a free port. Default: loopback, any port.
  std::string listen_address = "127.0.0.1:0";
  // Host that workers use to reach this server (the port is the bound one).
  std::string advertise_host = "127.0.0.1";
  // Coordinator address; empty: run without membership (tests drive the
  // manager).
  std::string coordinator;
  // RocksDB directory; empty: keep shards in memory only.
  std::string data_dir;
  // With data_dir: a snapshot with at least this many bytes of sparse rows
  // keeps them in a rows file of its own (RocksDbShardStoreOptions::
  // rows_file_bytes; --snapshot_rows_file_kib). Default 8 MiB.
  size_t snapshot_rows_file_bytes = size_t{8} << 20;
  // A directory on storage every server of the cluster reaches at the same
  // path (one file system, an NFS mount, a Kubernetes ReadWriteMany volume),
  // under which data_dir lies: announced at registration, so that a free
  // server may rebuild this server's places from data_dir if it is lost for
  // good (docs/durability.md, "A lost server rebuilt from shared storage").
  // Start fails with INVALID_ARGUMENT if data_dir is empty or not under it.
  // Default: empty (data_dir is this server's own).
  std::string shared_data_root;
  // How jobs persist their shards (the snapshot interval) and the sparse
  // tables' memory budget (sparse_memory_bytes, shared by all the server's
  // jobs; the tier under <data_dir>/sparse-tier when sparse_tier_dir is
  // empty and data_dir is not, else in a temporary directory). Default:
  // ServerJobOptions' defaults. sparse_budget is set by the server.
  ServerJobOptions job_options;
  // Prometheus listen address; empty: no HTTP endpoint.
  std::string metrics_address;
  // TLS and the cluster secret (docs/security.md). Default: plaintext, no
  // secret, and ParameterService open to anyone who can connect.
  SecurityOptions security;
  // Transport limits of the gRPC server (message size, streams per
  // connection). Default: ServerLimits' defaults.
  ServerLimits limits;
  // Serve gRPC server reflection. Default true.
  bool reflection = true;
  // Take PushShared and PullShared from workers on this host (payloads in
  // shared memory; docs/architecture.md, "Same-host payloads"). Default true.
  bool shared_payloads = true;
};

// Start() then Stop(); not restartable. Thread-safe after Start().
class ParameterServer {
 public:
  explicit ParameterServer(ParameterServerOptions options);
  ~ParameterServer();

  // Opens the store, starts serving and joins the cluster. Errors: the
  // security files' (Credentials::Load), the store's (a damaged or foreign
  // data directory), UNAVAILABLE if a port cannot be bound.
  absl::Status Start();
  // Stops serving health checks, leaves the cluster, answers the calls its
  // jobs hold (waiting pulls, BSP pushes) and every later one with
  // UNAVAILABLE (ParameterManager::kStopping), which workers retry, drains
  // RPCs, closes the store (a RocksDB store flushes, leaving no write-ahead
  // log). What SIGTERM does (server_main.cc).
  void Stop();

  // The bound gRPC port (after Start).
  int port() const { return port_; }
  // The bound metrics port, 0 if none.
  int metrics_port() const { return exposer_ ? exposer_->port() : 0; }
  // host:port others reach this server at.
  std::string address() const;
  ParameterManager* manager() { return manager_.get(); }
  // The shard store (after Start, until Stop); for tests.
  ShardStore* store() { return store_.get(); }
  // The server's metrics, as its /metrics endpoint serves them (for tests
  // that read them without HTTP).
  const prometheus::Registry& registry() const { return *registry_; }

 private:
  // Sets push_faults_ (tests/testing/parameter_server_test_peer.h).
  friend class ParameterServerTestPeer;

  // The jobs whose shards the store holds, for the coordinator.
  std::vector<v1::HeldAssignment> HeldJobs();
  // Opens the shard store options_ asks for (RocksDB in data_dir, else in
  // memory) into store_; returns its identity for the coordinator.
  absl::StatusOr<std::string> OpenStore();
  // options_.shared_data_root and data_dir as absolute paths (announced at
  // registration; empty without a shared root).
  std::string shared_data_root_;
  std::string shared_data_dir_;
  // Registers with options_.coordinator over `channel` and keeps the
  // assignments in step with its heartbeats.
  void StartMembership(ChannelSecurity channel, const std::string& storage_id);

  const ParameterServerOptions options_;
  // Faults injected into push replies, handed to the service at Start. Empty
  // (none) unless a test set it through ParameterServerTestPeer.
  PushFaultInjector push_faults_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<RpcMetrics> rpc_metrics_;
  std::unique_ptr<MetricsExposer> exposer_;
  std::unique_ptr<ShardStore> store_;
  // The server's sparse memory budget (null without one); outlives the jobs.
  std::unique_ptr<SparseMemoryBudget> sparse_budget_;
  std::unique_ptr<ParameterManager> manager_;
  std::unique_ptr<ParameterServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  // Applies the assignments membership_ delivers, off its thread.
  std::unique_ptr<AssignmentLoader> loader_;
  std::unique_ptr<Membership> membership_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace ps

#endif  // PS_SERVER_PARAMETER_SERVER_H_

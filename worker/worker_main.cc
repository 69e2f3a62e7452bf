// ps-worker: trains the jobs the coordinator assigns to it.
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/signals.h"
#include "worker/device.h"
#include "worker/worker_node.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7000", "coordinator address");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "gRPC listen address of the health service (port 0: any)");
ABSL_FLAG(std::string, device, "auto",
          "compute device: auto (GPU if present), cpu or gpu");
ABSL_FLAG(int, compute_threads, 1,
          "OpenBLAS threads of the CPU backend (0: OpenBLAS's default)");
ABSL_FLAG(double, slowdown, 1.0,
          "experiments: make this worker this many times slower (straggler)");
ABSL_FLAG(bool, overlap_push, true,
          "push a step's gradients while the next step pulls and computes "
          "(false: pull, compute and push in turn; for A/B measurements)");
ABSL_FLAG(bool, prefetch_pull, true,
          "pull the next step's parameters while this step computes (false: "
          "for A/B measurements)");
ABSL_FLAG(std::string, ack_log, "",
          "fault tests: append \"job worker clock\" here after every "
          "acknowledged push");
ABSL_FLAG(int, metrics_port, 0,
          "Prometheus /metrics port (0: any free port, -1: none)");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound ports to this file");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Prometheus listen host");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this process presents (server, and client to other "
          "members); with --tls_key and --tls_ca turns TLS on");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates that verify peers (required with TLS)");
ABSL_FLAG(bool, tls_require_client_cert, false,
          "refuse, in the TLS handshake, clients without a certificate signed "
          "by --tls_ca");
ABSL_FLAG(std::string, tls_server_name, "",
          "name expected in servers' certificates instead of the dialled host");
ABSL_FLAG(std::string, cluster_secret_file, "",
          "file holding the cluster secret that internal RPCs carry and "
          "require (empty: none)");
ABSL_FLAG(bool, reflection, true,
          "serve gRPC server reflection (grpcurl, grpc_cli); --noreflection "
          "turns it off");
ABSL_FLAG(int, max_concurrent_streams, 100,
          "calls one client connection may have open at once");

int main(int argc, char** argv) {
  ps::SetUpFlagsUsage("Worker: computes gradients for assigned jobs.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();

  absl::StatusOr<std::unique_ptr<ps::Backend>> backend = ps::CreateBackend(
      absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads));
  if (!backend.ok()) {
    PS_LOG_ERROR("ps-worker: --device: ", backend.status().message());
    return 1;
  }
  PS_LOG_INFO("ps-worker: computing on ", (*backend)->name());

  ps::WorkerNodeOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.trainer.slowdown = absl::GetFlag(FLAGS_slowdown);
  options.trainer.ack_log = absl::GetFlag(FLAGS_ack_log);
  options.trainer.overlap_push = absl::GetFlag(FLAGS_overlap_push);
  options.trainer.prefetch_pull = absl::GetFlag(FLAGS_prefetch_pull);
  options.security.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.security.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.security.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.security.tls.require_client_cert =
      absl::GetFlag(FLAGS_tls_require_client_cert);
  options.security.tls.server_name_override =
      absl::GetFlag(FLAGS_tls_server_name);
  options.security.cluster_secret_file =
      absl::GetFlag(FLAGS_cluster_secret_file);
  options.limits.max_concurrent_streams =
      absl::GetFlag(FLAGS_max_concurrent_streams);
  options.reflection = absl::GetFlag(FLAGS_reflection);
  if (options.trainer.slowdown < 1.0) {
    PS_LOG_ERROR("ps-worker: --slowdown must be >= 1");
    return 1;
  }
  options.metrics_address = ps::MetricsAddress(
      absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port));
  ps::WorkerNode worker(options, *std::move(backend));
  return ps::RunUntilSignalled("ps-worker", worker,
                               absl::GetFlag(FLAGS_port_file));
}

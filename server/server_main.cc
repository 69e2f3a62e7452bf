// ps-server: a parameter server process.
#include <algorithm>
#include <csignal>
#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/daemon.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/signals.h"
#include "server/parameter_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "gRPC listen address (port 0: any)");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "host workers use to reach this server");
ABSL_FLAG(std::string, coordinator, "127.0.0.1:7000", "coordinator address");
ABSL_FLAG(std::string, data_dir, "",
          "RocksDB directory for the shards (empty: memory only)");
ABSL_FLAG(int64_t, snapshot_log_mib,
          ps::ServerJobOptions().snapshot_log_bytes >> 20,
          "update-log MiB after which a job's shards are snapshotted and the "
          "log dropped (bounds the log on disk and the replay after a crash)");
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
  ps::SetUpFlagsUsage("Parameter server: holds shards of model parameters.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();

  ps::ParameterServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.job_options.snapshot_log_bytes =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_snapshot_log_mib)) << 20;
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
  options.metrics_address = ps::MetricsAddress(
      absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port));
  ps::ParameterServer server(options);
  return ps::RunUntilSignalled("ps-server", server,
                               absl::GetFlag(FLAGS_port_file));
}

// ps-coordinator: accepts jobs, keeps membership, schedules and tracks jobs.
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/daemon.h"
#include "common/flags_usage.h"
#include "common/logging.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7000", "gRPC listen address");
ABSL_FLAG(std::string, data_dir, "",
          "RocksDB directory of the job table (required)");
ABSL_FLAG(int, metrics_port, 0,
          "Prometheus /metrics port (0: any free port, -1: none)");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound ports to this file");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Prometheus listen host");
ABSL_FLAG(int, lease_ms, 5000,
          "a node missing heartbeats this long loses its lease");
ABSL_FLAG(int, heartbeat_interval_ms, 500, "heartbeat interval given to nodes");
ABSL_FLAG(int, recovery_grace_ms, 60000,
          "how long a running job waits for a lost server or worker to be "
          "back or replaced before it fails");
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
ABSL_FLAG(std::string, auth_token_file, "",
          "file of bearer tokens the job API accepts, one per line (empty: "
          "the job API is open)");
ABSL_FLAG(bool, allow_unauthenticated_reads, false,
          "with --auth_token_file: get, list and watch need no token");
ABSL_FLAG(int, max_jobs, 100,
          "jobs pending or running at once; more are RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_model_bytes, int64_t{200} << 20,
          "largest model (float32 parameters) a job may train");
ABSL_FLAG(int, retain_ended_jobs, 100,
          "ended jobs (records and trained models) kept; beyond, the ones "
          "that ended first are deleted, and the servers delete their shards "
          "(0: no limit)");
ABSL_FLAG(absl::Duration, retain_ended_for, absl::InfiniteDuration(),
          "delete an ended job this long after it ended, e.g. 168h "
          "(inf: keep it until --retain_ended_jobs or psctl delete)");

int main(int argc, char** argv) {
  ps::SetUpFlagsUsage("Coordinator of the parameter-server cluster.");
  absl::ParseCommandLine(argc, argv);
  ps::BlockTerminationSignals();

  ps::CoordinatorOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.metrics_address = ps::MetricsAddress(
      absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port));
  options.timing.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  options.timing.recovery_grace =
      absl::Milliseconds(absl::GetFlag(FLAGS_recovery_grace_ms));
  options.timing.heartbeat_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  options.security.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.security.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.security.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.security.tls.require_client_cert =
      absl::GetFlag(FLAGS_tls_require_client_cert);
  options.security.tls.server_name_override =
      absl::GetFlag(FLAGS_tls_server_name);
  options.security.cluster_secret_file =
      absl::GetFlag(FLAGS_cluster_secret_file);
  options.server_limits.max_concurrent_streams =
      absl::GetFlag(FLAGS_max_concurrent_streams);
  options.reflection = absl::GetFlag(FLAGS_reflection);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.allow_unauthenticated_reads =
      absl::GetFlag(FLAGS_allow_unauthenticated_reads);
  options.job_limits.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  options.job_limits.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  options.retention.max_ended_jobs = absl::GetFlag(FLAGS_retain_ended_jobs);
  options.retention.max_age = absl::GetFlag(FLAGS_retain_ended_for);
  ps::Coordinator coordinator(options);
  return ps::RunUntilSignalled("ps-coordinator", coordinator,
                               absl::GetFlag(FLAGS_port_file));
}

#include "common/member_flags.h"

#include "absl/flags/flag.h"
#include "common/daemon.h"
#include "common/grpc_util.h"

ABSL_FLAG(int, metrics_port, 0,
          "Prometheus /metrics port (0: any free port, -1: none)");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Prometheus listen host");
ABSL_FLAG(std::string, port_file, "",
          "if set, write the bound ports to this file");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate this process presents (server, and client to other "
          "members); with --tls_key and --tls_ca turns TLS on");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates that verify peers (required with TLS)");
ABSL_FLAG(bool, tls_require_client_cert, ps::TlsOptions().require_client_cert,
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
ABSL_FLAG(int, max_concurrent_streams,
          ps::ServerLimits().max_concurrent_streams,
          "calls one client connection may have open at once");

namespace ps {

MemberFlags ReadMemberFlags() {
  MemberFlags flags;
  TlsOptions& tls = flags.security.tls;
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  tls.key_file = absl::GetFlag(FLAGS_tls_key);
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  tls.require_client_cert = absl::GetFlag(FLAGS_tls_require_client_cert);
  tls.server_name_override = absl::GetFlag(FLAGS_tls_server_name);
  flags.security.cluster_secret_file = absl::GetFlag(FLAGS_cluster_secret_file);
  flags.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  flags.reflection = absl::GetFlag(FLAGS_reflection);
  flags.metrics_address = MetricsAddress(absl::GetFlag(FLAGS_metrics_host),
                                         absl::GetFlag(FLAGS_metrics_port));
  flags.port_file = absl::GetFlag(FLAGS_port_file);
  return flags;
}

}  // namespace ps

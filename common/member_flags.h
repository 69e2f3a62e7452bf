// The command-line flags every cluster member (ps-coordinator, ps-server,
// ps-worker) shares: TLS and the cluster secret, its gRPC server's limits and
// reflection, the metrics endpoint and the port file. Defined once in
// member_flags.cc, a library (ps_member_flags) that only those executables
// link: libraries never read flags.
#ifndef PS_COMMON_MEMBER_FLAGS_H_
#define PS_COMMON_MEMBER_FLAGS_H_

#include <string>

#include "common/security.h"

namespace ps {

// The shared flags' values, read after absl::ParseCommandLine.
struct MemberFlags {
  // --tls_cert, --tls_key, --tls_ca, --tls_require_client_cert,
  // --tls_server_name and --cluster_secret_file.
  SecurityOptions security;
  // --max_concurrent_streams (ServerLimits::max_concurrent_streams).
  int max_concurrent_streams = 0;
  // --reflection.
  bool reflection = true;
  // "host:port" of the Prometheus endpoint from --metrics_host and
  // --metrics_port; empty when the port is negative.
  std::string metrics_address;
  // --port_file: where the bound ports are written (empty: nowhere).
  std::string port_file;
};

// Reads the shared flags. Call after absl::ParseCommandLine; not thread-safe
// with flag changes.
MemberFlags ReadMemberFlags();

}  // namespace ps

#endif  // PS_COMMON_MEMBER_FLAGS_H_

// gRPC helpers shared by every process: channels and servers with the project's
// message limits, status conversion, deadlines and retry backoff.
#ifndef PS_COMMON_GRPC_UTIL_H_
#define PS_COMMON_GRPC_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"

namespace ps {

// Largest message either side accepts: a block is at most 4 MiB and a Pull
// reply holds many blocks, so the 4 MiB default would break at exactly 4 MiB
// (design §3).
inline constexpr int kMaxMessageBytes = 256 * 1024 * 1024;

// A plaintext channel to `target` (host:port) with the raised message limits.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target);

// A channel to `target` with the raised message limits and `security`: TLS
// credentials, and metadata (cluster secret, bearer token) added to every
// call by a client interceptor.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target,
                                             const ChannelSecurity& security);

// Transport limits of a gRPC server (docs/security.md).
struct ServerLimits {
  // Largest request message accepted; a larger one fails with
  // RESOURCE_EXHAUSTED before any handler runs. Default kMaxMessageBytes.
  int max_receive_message_bytes = kMaxMessageBytes;
  // Calls (HTTP/2 streams) one client connection may have open at once
  // (SETTINGS_MAX_CONCURRENT_STREAMS); that client's further calls wait in its
  // own transport until one ends, and other connections are unaffected.
  // Default 100 (a worker has a few calls open per server; psctl one).
  int max_concurrent_streams = 100;
  // Memory the server's transport may hold for all connections together
  // (received messages not yet handled, buffers): a gRPC ResourceQuota. Past
  // it gRPC shrinks flow-control windows and cancels calls in flight
  // ("Buffers full") until memory is released. 0: no quota. Default 0.
  int64_t memory_quota_bytes = 0;
};

// Sets the message limits and `limits` on a server builder and enables gRPC's
// standard health service (grpc.health.v1.Health) for the server it builds;
// with `reflection`, also gRPC server reflection
// (grpc.reflection.v1alpha.ServerReflection: grpcurl and grpc_cli list and
// call the served services without the .proto files). Without it the server
// serves no reflection, whatever other servers of the process do.
void ConfigureServerBuilder(grpc::ServerBuilder* builder,
                            const ServerLimits& limits = {},
                            bool reflection = true);

// Marks each of `services` (full names, e.g. "ps.v1.JobService") SERVING in
// the health service of `server` (built by a builder ConfigureServerBuilder
// configured), beside the whole server's "". Call after BuildAndStart.
void SetServicesServing(grpc::Server* server,
                        const std::vector<std::string>& services);

// Status conversions (codes and messages are kept).
absl::Status FromGrpcStatus(const grpc::Status& status);
grpc::Status ToGrpcStatus(const absl::Status& status);

// Sets ctx's deadline to now + timeout.
void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout);

// True for the codes a caller may retry an idempotent or deduplicated call on.
bool IsRetryable(const absl::Status& status);

// Exponential backoff with full jitter: Next() returns a random delay in
// [0, min(max, initial * multiplier^attempt)]. Not thread-safe.
class Backoff {
 public:
  // initial: first ceiling (default 50ms); max: largest ceiling (default 2s).
  explicit Backoff(absl::Duration initial = absl::Milliseconds(50),
                   absl::Duration max = absl::Seconds(2),
                   double multiplier = 2.0);
  absl::Duration Next();
  void Reset();

 private:
  absl::Duration initial_;
  absl::Duration max_;
  double multiplier_;
  absl::Duration ceiling_;
  absl::BitGen rng_;
};

// Splits "host:port" and returns the port, or -1.
int PortOf(const std::string& address);

}  // namespace ps

#endif  // PS_COMMON_GRPC_UTIL_H_

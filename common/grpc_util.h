// gRPC helpers shared by every process: channels and servers with the project's
// message limits, status conversion, deadlines and retry backoff.
#ifndef PS_COMMON_GRPC_UTIL_H_
#define PS_COMMON_GRPC_UTIL_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "grpcpp/grpcpp.h"

namespace ps {

// Largest message either side accepts: a block is at most 4 MiB and a Pull
// reply holds many blocks, so the 4 MiB default would break at exactly 4 MiB
// (docs/architecture.md, "Model, blocks and the shard map").
inline constexpr int kMaxMessageBytes = 256 * 1024 * 1024;

// How connections notice a dead peer and come back (docs/operations.md,
// "Network partitions"). Keepalive pings find a connection that a partition
// silently broke within keepalive_time + keepalive_timeout, instead of TCP's
// retransmission backoff (which left calls failing for 6-12 s after the
// network was back); a lost connection is then dialled again with a short,
// bounded backoff. Channels between cluster members also give up a
// connection attempt after 2 s (MemberConnectionOptions), so a node is back
// within about 2 s of its network.
struct ConnectionOptions {
  // Time between keepalive pings on an idle connection, with or without
  // calls open (GRPC_ARG_KEEPALIVE_TIME_MS; clients set
  // GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS and no limit on pings without
  // data). Default 1 s.
  absl::Duration keepalive_time = absl::Seconds(1);
  // How long a ping may go unanswered before the connection is closed and
  // its calls fail with UNAVAILABLE (GRPC_ARG_KEEPALIVE_TIMEOUT_MS). Default
  // 2 s: longer than a loaded peer takes to answer a ping.
  absl::Duration keepalive_timeout = absl::Seconds(2);
  // Delay before the second connection attempt
  // (GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS); it grows to
  // max_reconnect_backoff. Default 100 ms.
  absl::Duration initial_reconnect_backoff = absl::Milliseconds(100);
  // Largest delay between connection attempts
  // (GRPC_ARG_MAX_RECONNECT_BACKOFF_MS). Default 1 s.
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
  // gRPC's minimum reconnect backoff (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS),
  // which is the deadline of one connection attempt (TCP connect and the
  // TLS and HTTP/2 handshakes): an attempt whose SYN a partition dropped is
  // waited on (through TCP's SYN retransmissions, 1, 3, 7, 15 s) this long.
  // Default 20 s, gRPC's: a fail-fast call (psctl's) to a peer that is slow
  // to answer (paused, or not scheduled for a while) fails only if it takes
  // that long. Cluster members use 2 s (MemberConnectionOptions).
  absl::Duration min_reconnect_backoff = absl::Seconds(20);
  // A connection of the channel's own, not shared with other channels to
  // the same target (GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL): large transfers on
  // it (a worker's model upload) never queue a member's heartbeats behind
  // them in one connection's flow-control window. Default false.
  bool dedicated_connection = false;
};

// The ConnectionOptions of channels between cluster members (heartbeats,
// pulls, pushes, progress reports: calls that are all retried): the
// defaults, but a connection attempt is given up after 2 s and made again,
// so that a member reconnects within about 2 s of its network; a peer slower
// than that to handshake costs a retry, not a failure.
inline ConnectionOptions MemberConnectionOptions() {
  ConnectionOptions options;
  options.min_reconnect_backoff = absl::Seconds(2);
  return options;
}

// The arguments of every client channel: the raised message limits,
// keepalive and reconnection per `connection`.
grpc::ChannelArguments ClientChannelArguments(
    const ConnectionOptions& connection = {});

// A plaintext channel to `target` (host:port) with the raised message limits
// and the default ConnectionOptions.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target);

// A channel to `target` with the raised message limits, `connection`'s
// keepalive and reconnection, and `security`: TLS credentials, and metadata
// (cluster secret, bearer token) added to every call by a client
// interceptor.
std::shared_ptr<grpc::Channel> CreateChannel(
    const std::string& target, const ChannelSecurity& security,
    const ConnectionOptions& connection = {});

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

// The keepalive arguments ConfigureServerBuilder sets on a server, as
// (name, value) pairs: pings accepted every `connection.keepalive_time` / 2
// without data and no ping strikes, and the server's own pings per
// `connection`.
std::vector<std::pair<std::string, int>> ServerConnectionArguments(
    const ConnectionOptions& connection = {});

// Sets the message limits and `limits` on a server builder and enables gRPC's
// standard health service (grpc.health.v1.Health) for the server it builds;
// with `reflection`, also gRPC server reflection
// (grpc.reflection.v1alpha.ServerReflection: grpcurl and grpc_cli list and
// call the served services without the .proto files). Without it the server
// serves no reflection, whatever other servers of the process do. The server
// also accepts clients' keepalive pings, with or without calls (it never
// answers them with GOAWAY "too_many_pings"), and pings its clients as they
// ping it (ServerConnectionArguments).
void ConfigureServerBuilder(grpc::ServerBuilder* builder,
                            const ServerLimits& limits = {},
                            bool reflection = true,
                            const ConnectionOptions& connection = {});

// Marks each of `services` (full names, e.g. "ps.v1.JobService") SERVING in
// the health service of `server` (built by a builder ConfigureServerBuilder
// configured), beside the whole server's "". Call after BuildAndStart.
void SetServicesServing(grpc::Server* server,
                        const std::vector<std::string>& services);

// Status conversions (codes and messages are kept, and the payloads, as
// grpc-status-details-bin: common/status_details.h).
absl::Status FromGrpcStatus(const grpc::Status& status);

// A ByteBuffer's bytes as views over its slices, which `slices` keeps (so
// the views live as long as it does).
absl::StatusOr<std::vector<std::string_view>> ViewByteBuffer(
    const grpc::ByteBuffer& buffer, std::vector<grpc::Slice>* slices);

// A small message in a ByteBuffer (a raw method's request or reply), parsed
// by Protobuf from one copy. Errors: INVALID_ARGUMENT "<name>: not a valid
// message".
template <typename Message>
absl::StatusOr<Message> ParseByteBuffer(const grpc::ByteBuffer& buffer,
                                        std::string_view name) {
  std::vector<grpc::Slice> slices;
  absl::StatusOr<std::vector<std::string_view>> segments =
      ViewByteBuffer(buffer, &slices);
  if (!segments.ok()) return segments.status();
  std::string bytes;
  for (std::string_view segment : *segments) bytes.append(segment);
  Message message;
  if (!message.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        std::string(name).append(": not a valid message"));
  }
  return message;
}
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

// ParameterClient: the carrier of each call to a server
// (worker/payload_transport.h). A server at a loopback address is called
// through shared memory until it refuses that; every other call, and one
// that shared memory cannot carry, goes through the socket.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/net_address.h"
#include "worker/parameter_client.h"

namespace ps {

void ParameterClient::OpenTransports() {
  shared_ = std::make_unique<std::atomic<bool>[]>(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    Server& server = servers_[s];
    const std::string& address = addresses_[s];
    std::shared_ptr<grpc::Channel> channel =
        CreateChannel(address, options_.channel, options_.connection);
    shared_[s] = options_.shared_payloads && IsLoopbackHost(HostOf(address));
    if (shared_[s]) {
      server.shared = std::make_unique<SharedMemoryTransport>(
          channel, address, server.max_reply_bytes, &regions_);
    }
    server.socket = std::make_unique<SocketTransport>(std::move(channel));
  }
}

void ParameterClient::CallServer(int s, const char* what, Start start,
                                 PayloadTransport::Done done) {
  Server& server = servers_[s];
  if (UsesSharedMemory(s)) {
    const absl::Status started =
        start(*server.shared, [this, s, done](absl::Status status) {
          done(SharedCallFailed(s, std::move(status)));
        });
    if (started.ok()) return;
    // This call goes through the socket.
    PS_LOG_WARNING(what, " ", addresses_[s], ": ", started.ToString());
  }
  const absl::Status started = start(*server.socket, std::move(done));
  PS_CHECK(started.ok(), "the socket takes every call: ", started.ToString());
}

absl::Status ParameterClient::SharedCallFailed(int s, absl::Status status) {
  if (!absl::IsUnimplemented(status)) return status;
  if (shared_[s].exchange(false)) {
    PS_LOG_INFO("server ", addresses_[s],
                " takes no shared-memory payloads from this worker (",
                status.message(), "): calling it through the socket");
  }
  return absl::AbortedError(absl::StrCat(
      "shared-memory payloads refused, calling again through the socket: ",
      status.message()));
}

}  // namespace ps

// The payloads of a worker's calls to a server on its host, in shared
// memory (docs/architecture.md, "Same-host payloads"): a push request is
// copied into a region and PushShared names it; a pull lends a region that
// the server writes its reply into, and PullShared names it. The regions
// come from the client's SharedRegionPool.
#ifndef PS_WORKER_SHARED_MEMORY_TRANSPORT_H_
#define PS_WORKER_SHARED_MEMORY_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>

#include "worker/payload_transport.h"
#include "worker/shared_region_pool.h"

namespace ps {

// Each call takes a region of its own, kept in its TransportSlot: it goes
// back to the pool when the slot goes if the call was answered OK, and is
// removed as soon as the call fails otherwise (the server may still handle
// that call later, reading or writing the region). A call for which no
// region can be had is not started (Push and Pull return the pool's error).
// A server that takes no shared-memory payloads answers UNIMPLEMENTED, which
// this transport reports as it is: turning to the socket is the caller's
// policy. Thread-safe.
class SharedMemoryTransport final : public PayloadTransport {
 public:
  // `address` names the server in errors; `max_reply_bytes` is the largest
  // pull reply it can send (the size of a pull's region unless the request
  // names its own bound, PullRequestBytes::reply_bytes). `pool` must
  // outlive the transport and every call made through it.
  SharedMemoryTransport(std::shared_ptr<grpc::Channel> channel,
                        std::string address, size_t max_reply_bytes,
                        SharedRegionPool* pool);

  absl::Status Push(grpc::ClientContext* context,
                    const grpc::ByteBuffer& request, TransportSlot* slot,
                    Done done) override;
  absl::Status Pull(grpc::ClientContext* context,
                    const PullRequestBytes& request, ReplyReader read,
                    TransportSlot* slot, Done done) override;

 private:
  class RegionLoan;

  // Lends `slot` a region of at least `size` bytes for its next call.
  absl::StatusOr<RegionLoan*> Lend(size_t size, TransportSlot* slot);
  // Hands `read` the pull reply that `reply` (a SharedPullResponse) says
  // was written into `region`.
  absl::Status ReadReply(const grpc::ByteBuffer& reply,
                         const SharedRegion& region,
                         const ReplyReader& read) const;

  grpc::GenericStub stub_;
  const std::string address_;
  const size_t max_reply_bytes_;
  SharedRegionPool* const pool_;
  const std::string push_method_;
  const std::string pull_method_;
};

}  // namespace ps

#endif  // PS_WORKER_SHARED_MEMORY_TRANSPORT_H_

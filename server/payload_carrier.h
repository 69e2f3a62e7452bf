// Where the payload of one call of the data path travels, as the server sees
// it (docs/architecture.md, "Same-host payloads"): in the gRPC message
// itself (MessageCarrier: Push, Pull) or in a shared-memory region of the
// worker's that the message names (SharedMemoryCarrier: PushShared,
// PullShared). ParameterServiceImpl handles a push, and a pull, by one path
// whichever carries it; another carrier (RDMA, say) is another
// implementation. The worker's side is worker/payload_transport.h.
#ifndef PS_SERVER_PAYLOAD_CARRIER_H_
#define PS_SERVER_PAYLOAD_CARRIER_H_

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/parameter_wire.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "ps/v1/parameter.pb.h"
#include "server/shared_region_cache.h"

namespace ps {

// Where a pull's reply goes.
struct ReplyDestination {
  // The buffer the reply is encoded into; null: one of the manager's.
  ReplyAllocator allocate;
  // Makes the encoded reply the call's response and returns how many of its
  // bytes travel outside the response (for metrics); its error is the
  // call's. Null: the reply is the response, sent as it is.
  std::function<absl::StatusOr<size_t>(WireMessage reply,
                                       grpc::ByteBuffer* response)>
      store;
};

// One call's carrier: made for the call, used on the handler's thread, and
// gone when the handler returns (what a pull's ReplyDestination holds lives
// on in it). Not thread-safe.
class PayloadCarrier {
 public:
  virtual ~PayloadCarrier() = default;

  // Whether this caller (a member of the cluster) may send its payload this
  // way: OK, or the status to answer.
  virtual absl::Status Admit(const grpc::CallbackServerContext& ctx) = 0;
  // A push: the bytes of its PushRequest, given the call's message. They
  // stay valid while the carrier does. Errors: INVALID_ARGUMENT for a
  // message that is not what the method takes, and the carrier's own.
  virtual absl::StatusOr<std::span<const std::string_view>> PushRequest(
      const grpc::ByteBuffer& message) = 0;
  // Bytes of the push's payload that travelled outside its message (for
  // metrics), once PushRequest has read the message.
  virtual size_t payload_bytes() const { return 0; }
  // A pull: its PullRequest, given the call's message, and where its reply
  // goes. Errors as PushRequest.
  virtual absl::StatusOr<v1::PullRequest> PullRequest(
      const grpc::ByteBuffer& message, ReplyDestination* reply) = 0;
};

// The payload in the message: a push's bytes are read where gRPC received
// them, a pull's reply is the response.
class MessageCarrier final : public PayloadCarrier {
 public:
  absl::Status Admit(const grpc::CallbackServerContext& ctx) override;
  absl::StatusOr<std::span<const std::string_view>> PushRequest(
      const grpc::ByteBuffer& message) override;
  absl::StatusOr<v1::PullRequest> PullRequest(const grpc::ByteBuffer& message,
                                              ReplyDestination* reply) override;

 private:
  std::vector<grpc::Slice> slices_;
  std::vector<std::string_view> segments_;
};

// The payload in a region of the caller's shared memory: a push's bytes are
// copied out of the region first (the checks and the update must read the
// same bytes, whatever the region's owner does meanwhile); a pull's reply
// is written into the region, and the response says how long it is.
// Admits loopback peers only, and only when `enabled`; a region this server
// cannot find or use is UNIMPLEMENTED too (the worker then calls through
// the socket).
class SharedMemoryCarrier final : public PayloadCarrier {
 public:
  // `regions` must outlive the carrier and the replies it directs.
  SharedMemoryCarrier(SharedRegionCache* regions, bool enabled)
      : regions_(regions), enabled_(enabled) {}

  absl::Status Admit(const grpc::CallbackServerContext& ctx) override;
  absl::StatusOr<std::span<const std::string_view>> PushRequest(
      const grpc::ByteBuffer& message) override;
  size_t payload_bytes() const override { return payload_bytes_; }
  absl::StatusOr<v1::PullRequest> PullRequest(const grpc::ByteBuffer& message,
                                              ReplyDestination* reply) override;

 private:
  // The bytes a call names. Errors: UNIMPLEMENTED for a region this server
  // cannot find or use, OUT_OF_RANGE and INVALID_ARGUMENT for a span that
  // cannot be a region's.
  absl::StatusOr<SharedRegionCache::Span> Bytes(const v1::SharedSpan& where);

  SharedRegionCache* const regions_;
  const bool enabled_;
  size_t payload_bytes_ = 0;
  std::string copy_;  // A push's bytes, copied out of the region.
  std::string_view segment_;
};

}  // namespace ps

#endif  // PS_SERVER_PAYLOAD_CARRIER_H_

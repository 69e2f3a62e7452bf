#include "server/payload_carrier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/net_address.h"

namespace ps {

absl::Status MessageCarrier::Admit(const grpc::CallbackServerContext& /*ctx*/) {
  return absl::OkStatus();
}

absl::StatusOr<std::span<const std::string_view>> MessageCarrier::PushRequest(
    const grpc::ByteBuffer& message) {
  // The request's slices as gRPC received them: gradients are read in place
  // (the manager reads them only during the call).
  absl::StatusOr<std::vector<std::string_view>> segments =
      ViewByteBuffer(message, &slices_);
  if (!segments.ok()) return segments.status();
  segments_ = *std::move(segments);
  return std::span<const std::string_view>(segments_);
}

absl::StatusOr<v1::PullRequest> MessageCarrier::PullRequest(
    const grpc::ByteBuffer& message, ReplyDestination* /*reply*/) {
  return ParseByteBuffer<v1::PullRequest>(message, "PullRequest");
}

absl::Status SharedMemoryCarrier::Admit(
    const grpc::CallbackServerContext& ctx) {
  if (!enabled_) {
    return absl::UnimplementedError(
        "shared-memory payloads are off on this server "
        "(--shared_memory_payloads=false)");
  }
  if (!IsLoopbackHost(PeerHost(ctx.peer()))) {
    return absl::UnimplementedError(absl::StrCat(
        "shared-memory payloads are for workers on the server's host; peer ",
        ctx.peer(), " is not a loopback address"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedRegionCache::Span> SharedMemoryCarrier::Bytes(
    const v1::SharedSpan& where) {
  absl::StatusOr<SharedRegionCache::Span> span =
      regions_->Get(where.region(), where.offset(), where.length());
  if (absl::IsNotFound(span.status()) ||
      absl::IsFailedPrecondition(span.status())) {
    // Most likely a worker on another host whose address looks local (a
    // container of its own): it falls back to the socket.
    return absl::UnimplementedError(span.status().message());
  }
  return span;
}

absl::StatusOr<std::span<const std::string_view>>
SharedMemoryCarrier::PushRequest(const grpc::ByteBuffer& message) {
  absl::StatusOr<v1::SharedPushRequest> shared =
      ParseByteBuffer<v1::SharedPushRequest>(message, "SharedPushRequest");
  if (!shared.ok()) return shared.status();
  payload_bytes_ = shared->request().length();
  absl::StatusOr<SharedRegionCache::Span> span = Bytes(shared->request());
  if (!span.ok()) return span.status();
  // Copied out first: the checks and the update must read the same bytes,
  // whatever the region's owner does meanwhile.
  copy_.assign(span->data, span->size);
  segment_ = copy_;
  return std::span<const std::string_view>(&segment_, 1);
}

absl::StatusOr<v1::PullRequest> SharedMemoryCarrier::PullRequest(
    const grpc::ByteBuffer& message, ReplyDestination* reply) {
  absl::StatusOr<v1::SharedPullRequest> shared =
      ParseByteBuffer<v1::SharedPullRequest>(message, "SharedPullRequest");
  if (!shared.ok()) return shared.status();
  absl::StatusOr<SharedRegionCache::Span> span = Bytes(shared->reply());
  if (!span.ok()) return span.status();
  // The reply is encoded straight into the region when it fits.
  reply->allocate = [span = *span](size_t size) {
    return size <= span.size ? WireMessage::Borrow(span.data, size, span.region)
                             : WireMessage::Allocate(size);
  };
  reply->store = [span = *std::move(span)](
                     WireMessage encoded,
                     grpc::ByteBuffer* response) -> absl::StatusOr<size_t> {
    if (encoded.data() != span.data) {
      return absl::OutOfRangeError(absl::StrCat(
          "pull reply of ", encoded.size(), " bytes does not fit the ",
          span.size, " bytes of shared region ", span.region->name()));
    }
    v1::SharedPullResponse written;
    written.set_length(encoded.size());
    grpc::Slice slice(written.SerializeAsString());
    *response = grpc::ByteBuffer(&slice, 1);
    return encoded.size();
  };
  return std::move(*shared->mutable_pull());
}

}  // namespace ps

#include "worker/shared_memory_transport.h"

#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"

namespace ps {
namespace {

grpc::ByteBuffer SerializedBuffer(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

// A region lent to one call: back to the pool when the slot holding it
// goes, unless the call failed (Forfeit), which removes it at once.
class SharedMemoryTransport::RegionLoan final : public TransportLoan {
 public:
  RegionLoan(std::unique_ptr<SharedRegion> region, SharedRegionPool* pool)
      : region_(std::move(region)), pool_(pool) {}
  ~RegionLoan() override { pool_->Release(std::move(region_)); }

  SharedRegion& region() const { return *region_; }
  // The call ended with `status`: a region whose call was not answered OK
  // is removed, never reused.
  void CallEnded(const absl::Status& status) {
    if (!status.ok()) region_.reset();
  }

 private:
  std::unique_ptr<SharedRegion> region_;
  SharedRegionPool* const pool_;
};

SharedMemoryTransport::SharedMemoryTransport(
    std::shared_ptr<grpc::Channel> channel, std::string address,
    size_t max_reply_bytes, SharedRegionPool* pool)
    : stub_(std::move(channel)),
      address_(std::move(address)),
      max_reply_bytes_(max_reply_bytes),
      pool_(pool),
      push_method_(ParameterMethod("PushShared")),
      pull_method_(ParameterMethod("PullShared")) {}

absl::StatusOr<SharedMemoryTransport::RegionLoan*> SharedMemoryTransport::Lend(
    size_t size, TransportSlot* slot) {
  // A server is called again only after its call failed, which removed
  // that call's region: every attempt takes a region here.
  absl::StatusOr<std::unique_ptr<SharedRegion>> region = pool_->Acquire(size);
  if (!region.ok()) return region.status();
  auto* loan = new RegionLoan(*std::move(region), pool_);
  slot->loan.reset(loan);
  return loan;
}

absl::Status SharedMemoryTransport::Push(grpc::ClientContext* context,
                                         const grpc::ByteBuffer& request,
                                         TransportSlot* slot, Done done) {
  std::vector<grpc::Slice> slices;
  absl::StatusOr<std::vector<std::string_view>> bytes =
      ViewByteBuffer(request, &slices);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<RegionLoan*> loan = Lend(request.Length(), slot);
  if (!loan.ok()) return loan.status();
  // The same bytes Push would send, copied into the region.
  char* out = (*loan)->region().data();
  for (std::string_view piece : *bytes) {
    std::memcpy(out, piece.data(), piece.size());
    out += piece.size();
  }
  v1::SharedPushRequest message;
  message.mutable_request()->set_region((*loan)->region().name());
  message.mutable_request()->set_length(request.Length());
  slot->message = SerializedBuffer(message);
  slot->reply.Clear();
  stub_.UnaryCall(
      context, push_method_, grpc::StubOptions(), &slot->message, &slot->reply,
      [loan = *loan, done = std::move(done)](const grpc::Status& status) {
        absl::Status result = FromGrpcStatus(status);
        loan->CallEnded(result);
        done(std::move(result));
      });
  return absl::OkStatus();
}

absl::Status SharedMemoryTransport::Pull(grpc::ClientContext* context,
                                         const PullRequestBytes& request,
                                         ReplyReader read, TransportSlot* slot,
                                         Done done) {
  absl::StatusOr<RegionLoan*> loan = Lend(
      request.reply_bytes > 0 ? request.reply_bytes : max_reply_bytes_, slot);
  if (!loan.ok()) return loan.status();
  v1::SharedPullRequest message;
  *message.mutable_pull() = request.message;
  message.mutable_reply()->set_region((*loan)->region().name());
  message.mutable_reply()->set_length((*loan)->region().size());
  slot->message = SerializedBuffer(message);
  slot->reply.Clear();
  stub_.UnaryCall(context, pull_method_, grpc::StubOptions(), &slot->message,
                  &slot->reply,
                  [this, slot, loan = *loan, read = std::move(read),
                   done = std::move(done)](const grpc::Status& status) {
                    absl::Status result = FromGrpcStatus(status);
                    if (result.ok())
                      result = ReadReply(slot->reply, loan->region(), read);
                    loan->CallEnded(result);
                    done(std::move(result));
                  });
  return absl::OkStatus();
}

absl::Status SharedMemoryTransport::ReadReply(const grpc::ByteBuffer& reply,
                                              const SharedRegion& region,
                                              const ReplyReader& read) const {
  absl::StatusOr<v1::SharedPullResponse> shared =
      ParseByteBuffer<v1::SharedPullResponse>(reply, "SharedPullResponse");
  if (!shared.ok() || shared->length() > region.size()) {
    return absl::InternalError(absl::StrCat(
        "pull reply from ", address_, ": not ",
        shared.ok() ? "within its shared region" : "a SharedPullResponse"));
  }
  const std::string_view bytes(region.data(), shared->length());
  return read(std::span<const std::string_view>(&bytes, 1));
}

}  // namespace ps

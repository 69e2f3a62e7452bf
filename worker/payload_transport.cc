#include "worker/payload_transport.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "ps/v1/parameter.grpc.pb.h"

namespace ps {

PullRequestBytes::PullRequestBytes(v1::PullRequest request)
    : message(std::move(request)) {
  grpc::Slice slice(message.SerializeAsString());
  bytes = grpc::ByteBuffer(&slice, 1);
}

std::string ParameterMethod(const char* method) {
  return absl::StrCat("/", v1::ParameterService::service_full_name(), "/",
                      method);
}

SocketTransport::SocketTransport(std::shared_ptr<grpc::Channel> channel)
    : stub_(std::move(channel)),
      push_method_(ParameterMethod("Push")),
      pull_method_(ParameterMethod("Pull")) {}

absl::Status SocketTransport::Push(grpc::ClientContext* context,
                                   const grpc::ByteBuffer& request,
                                   TransportSlot* slot, Done done) {
  slot->reply.Clear();
  stub_.UnaryCall(context, push_method_, grpc::StubOptions(), &request,
                  &slot->reply,
                  [done = std::move(done)](const grpc::Status& status) {
                    done(FromGrpcStatus(status));
                  });
  return absl::OkStatus();
}

absl::Status SocketTransport::Pull(grpc::ClientContext* context,
                                   const PullRequestBytes& request,
                                   ReplyReader read, TransportSlot* slot,
                                   Done done) {
  slot->reply.Clear();
  stub_.UnaryCall(
      context, pull_method_, grpc::StubOptions(), &request.bytes, &slot->reply,
      [slot, read = std::move(read),
       done = std::move(done)](const grpc::Status& status) {
        absl::Status result = FromGrpcStatus(status);
        if (result.ok()) {
          // Read where gRPC received them: the values are copied once, by
          // `read`, into their tensors.
          std::vector<grpc::Slice> slices;
          absl::StatusOr<std::vector<std::string_view>> segments =
              ViewByteBuffer(slot->reply, &slices);
          result = segments.ok() ? read(*segments) : segments.status();
        }
        done(std::move(result));
      });
  return absl::OkStatus();
}

}  // namespace ps

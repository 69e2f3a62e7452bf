// Raw gRPC calls in tests: request bytes that no client library would send,
// and the reply's bytes as they came.
#ifndef PS_TESTS_TESTING_RAW_GRPC_H_
#define PS_TESTS_TESTING_RAW_GRPC_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace ps::testing {

// The bytes of `buffer`; empty if it cannot be read.
inline std::string ByteBufferBytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// A unary call of `method` ("/package.Service/Method") on `channel` with
// `bytes` as the request, a 5 s deadline; the reply's bytes into `reply`
// when given. Blocks until the call ends; returns its status.
inline grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& method,
                                 const std::string& bytes,
                                 std::string* reply = nullptr) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(5));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (reply != nullptr) *reply = ByteBufferBytes(response);
  return status;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_RAW_GRPC_H_

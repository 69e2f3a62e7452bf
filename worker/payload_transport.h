// How the bytes of one call of the data path (a push request, a pull reply)
// travel between a worker and one server: in the gRPC message itself
// (SocketTransport: Push, Pull) or in a shared-memory region the message
// names (SharedMemoryTransport: PushShared, PullShared; docs/architecture.md,
// "Same-host payloads"). ParameterClient builds the same requests and reads
// the same replies whatever carries them; another carrier (RDMA, say) is
// another implementation of PayloadTransport.
//
// A transport carries one serialized message per call and knows nothing of
// blocks or clocks. A pipelined step (issue 31: a push's blocks sent one
// call at a time, in an order the client chooses) is then several Push calls
// through the same transport, each with a TransportSlot of its own; the
// SharedSpan's offset lets such calls share one region later.
#ifndef PS_WORKER_PAYLOAD_TRANSPORT_H_
#define PS_WORKER_PAYLOAD_TRANSPORT_H_

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "ps/v1/parameter.pb.h"

namespace ps {

// Something a transport lent one call (a shared-memory region), kept by the
// call's TransportSlot until its request has ended.
class TransportLoan {
 public:
  virtual ~TransportLoan() = default;
};

// One server's part of one request: the buffers of its call in flight and
// what the transport lent that call. The request owns one per server and
// destroys them only once every call of the request has ended (a server may
// still handle a call after it failed here: what the call named must outlive
// it unless the transport says otherwise). Used by one call at a time; a
// later attempt to the same server reuses it.
struct TransportSlot {
  // The call's message, when the transport writes one of its own (the
  // SharedPushRequest or SharedPullRequest naming a region).
  grpc::ByteBuffer message;
  // The call's reply, as gRPC received it.
  grpc::ByteBuffer reply;
  // What the transport lent the call; null when nothing.
  std::unique_ptr<TransportLoan> loan;
};

// A PullRequest, as a message and as its bytes (serialized once, for every
// server and attempt of one pull).
struct PullRequestBytes {
  explicit PullRequestBytes(v1::PullRequest request);
  v1::PullRequest message;
  grpc::ByteBuffer bytes;
  // At most the bytes of its reply (a transport that lends the reply's
  // memory lends this much); 0: the transport's largest.
  size_t reply_bytes = 0;
};

// Carries the calls to one server. Thread-safe: calls to different servers,
// and a push and a pull to the same one, may be in flight together.
class PayloadTransport {
 public:
  // The call's outcome, reported exactly once, on a gRPC thread.
  using Done = std::function<void(absl::Status)>;
  // Reads a pull reply: the serialized PullResponse, in segments that stay
  // valid only while it runs. Its status becomes the call's.
  using ReplyReader =
      std::function<absl::Status(std::span<const std::string_view> reply)>;

  virtual ~PayloadTransport() = default;

  // Sends one push: `request` is the serialized PushRequest, whose memory
  // must stay valid until `done` runs. `context` carries the deadline and
  // stays valid until then too. Returns OK once the call is started (`done`
  // will run), or, without starting it (`done` never runs), why this
  // transport cannot carry it now (e.g. no shared region could be had): the
  // caller may then send it another way.
  virtual absl::Status Push(grpc::ClientContext* context,
                            const grpc::ByteBuffer& request,
                            TransportSlot* slot, Done done) = 0;
  // Sends one pull and hands the reply's bytes to `read` before `done`
  // runs. `request` must stay valid until `done` runs. Returns as Push.
  virtual absl::Status Pull(grpc::ClientContext* context,
                            const PullRequestBytes& request, ReplyReader read,
                            TransportSlot* slot, Done done) = 0;
};

// The payloads in the gRPC messages (Push, Pull), on the channel's
// transport (TCP or a Unix socket). Takes every call.
class SocketTransport final : public PayloadTransport {
 public:
  explicit SocketTransport(std::shared_ptr<grpc::Channel> channel);

  absl::Status Push(grpc::ClientContext* context,
                    const grpc::ByteBuffer& request, TransportSlot* slot,
                    Done done) override;
  absl::Status Pull(grpc::ClientContext* context,
                    const PullRequestBytes& request, ReplyReader read,
                    TransportSlot* slot, Done done) override;

 private:
  grpc::GenericStub stub_;
  const std::string push_method_;
  const std::string pull_method_;
};

// The full name of ParameterService's method `method` ("Push"), as a
// generic call names it.
std::string ParameterMethod(const char* method);

}  // namespace ps

#endif  // PS_WORKER_PAYLOAD_TRANSPORT_H_

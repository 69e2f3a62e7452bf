#include "bench/pushpull_baseline.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/logging.h"

namespace ps::pushpull {
namespace {

constexpr size_t kChunkBytes = 1 << 20;  // As kDefaultBlockElems floats.

size_t PayloadBytes(const bench::Payload& p) {
  size_t n = 0;
  for (const std::string& c : p.data()) n += c.size();
  return n;
}

}  // namespace

// Answers Echo with the payload, Send with nothing, and Fetch with the bytes
// asked for (at most `max_bytes`).
class EchoService final : public bench::BenchEcho::CallbackService {
 public:
  explicit EchoService(size_t max_bytes) : source_(max_bytes, '\x5a') {}

  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* ctx,
                                 const bench::Payload* request,
                                 bench::Payload* response) override {
    *response->mutable_data() = request->data();
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* Send(grpc::CallbackServerContext* ctx,
                                 const bench::Payload* request,
                                 bench::Payload* response) override {
    return Done(ctx);
  }
  grpc::ServerUnaryReactor* Fetch(grpc::CallbackServerContext* ctx,
                                  const bench::Payload* request,
                                  bench::Payload* response) override {
    size_t left = std::min<size_t>(request->want(), source_.size());
    for (size_t at = 0; left > 0;) {
      const size_t n = std::min(left, kChunkBytes);
      response->add_data(source_.data() + at, n);
      at += n;
      left -= n;
    }
    return Done(ctx);
  }

 private:
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  const std::string source_;
};

BaselineServer::BaselineServer(size_t max_bytes)
    : service_(std::make_unique<EchoService>(max_bytes)) {
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  PS_CHECK(server_ != nullptr);
}

BaselineServer::~BaselineServer() { server_->Shutdown(); }

std::string BaselineServer::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

BaselineServers::BaselineServers(int count, size_t max_bytes) {
  for (int i = 0; i < count; ++i) {
    servers_.push_back(std::make_unique<BaselineServer>(max_bytes));
    addresses_.push_back(servers_.back()->address());
  }
}

BaselineClient::BaselineClient(const std::vector<std::string>& addresses,
                               size_t bytes) {
  const size_t n = addresses.size();
  for (size_t i = 0; i < n; ++i) {
    stubs_.push_back(bench::BenchEcho::NewStub(CreateChannel(addresses[i])));
    // Same split as the shard planner's, roughly: equal shares.
    const size_t share = bytes / n + (i < bytes % n ? 1 : 0);
    shares_.push_back(share);
    bench::Payload p;
    for (size_t at = 0; at < share; at += kChunkBytes) {
      p.add_data(std::string(std::min(kChunkBytes, share - at), '\x33'));
    }
    payloads_.push_back(std::move(p));
  }
}

bool BaselineClient::Call(BaselineOp op) {
  const size_t n = stubs_.size();
  std::vector<grpc::ClientContext> contexts(n);
  std::vector<bench::Payload> replies(n);
  std::vector<bench::Payload> fetches(n);
  std::vector<grpc::Status> statuses(n);
  absl::BlockingCounter pending(n);
  for (size_t i = 0; i < n; ++i) {
    SetDeadline(&contexts[i], absl::Seconds(60));
    auto done = [&, i](grpc::Status s) {
      statuses[i] = std::move(s);
      pending.DecrementCount();
    };
    auto* async = stubs_[i]->async();
    switch (op) {
      case BaselineOp::kEcho:
        async->Echo(&contexts[i], &payloads_[i], &replies[i], done);
        break;
      case BaselineOp::kSend:
        async->Send(&contexts[i], &payloads_[i], &replies[i], done);
        break;
      case BaselineOp::kFetch:
        fetches[i].set_want(shares_[i]);
        async->Fetch(&contexts[i], &fetches[i], &replies[i], done);
        break;
    }
  }
  pending.Wait();
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      PS_LOG_ERROR("baseline: ", statuses[i].error_message());
      return false;
    }
    if (op != BaselineOp::kSend && PayloadBytes(replies[i]) != shares_[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace ps::pushpull

// ps-bench's baseline (bench/pushpull_bench.cc): gRPC servers running a
// callback service (BenchEcho) built with the same ServerBuilder settings as
// ours, and clients that send a payload split over the servers in parallel:
// Send (payload in, empty reply) is Push's baseline, Fetch (small request,
// payload back) is Pull's, Echo (payload both ways) is for reference.
#ifndef PS_BENCH_PUSHPULL_BASELINE_H_
#define PS_BENCH_PUSHPULL_BASELINE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace ps::pushpull {

class EchoService;

// One BenchEcho server on a free loopback port, able to send `max_bytes`.
class BaselineServer {
 public:
  explicit BaselineServer(size_t max_bytes);
  ~BaselineServer();
  BaselineServer(const BaselineServer&) = delete;
  BaselineServer& operator=(const BaselineServer&) = delete;

  // "127.0.0.1:port".
  std::string address() const;

 private:
  std::unique_ptr<EchoService> service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// `count` BaselineServers, each able to send `max_bytes`, and their
// addresses.
class BaselineServers {
 public:
  BaselineServers(int count, size_t max_bytes);

  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::vector<std::unique_ptr<BaselineServer>> servers_;
  std::vector<std::string> addresses_;
};

// Which BenchEcho method a baseline call makes.
enum class BaselineOp { kEcho, kSend, kFetch };

// One baseline client (a worker thread's): calls every server in parallel
// with its share of the payload and waits for all. Not thread-safe.
class BaselineClient {
 public:
  // A client of `addresses` whose calls move `bytes` in all.
  BaselineClient(const std::vector<std::string>& addresses, size_t bytes);

  // One call of `op` on every server; false (logged) on an error or a reply
  // of the wrong size.
  bool Call(BaselineOp op);

 private:
  std::vector<std::unique_ptr<bench::BenchEcho::Stub>> stubs_;
  std::vector<size_t> shares_;
  std::vector<bench::Payload> payloads_;
};

}  // namespace ps::pushpull

#endif  // PS_BENCH_PUSHPULL_BASELINE_H_

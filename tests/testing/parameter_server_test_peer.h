// The test seam of ParameterServer: what tests set on a server that
// production code never does, kept out of ParameterServerOptions.
#ifndef PS_TESTS_TESTING_PARAMETER_SERVER_TEST_PEER_H_
#define PS_TESTS_TESTING_PARAMETER_SERVER_TEST_PEER_H_

#include <memory>
#include <utility>

#include "server/parameter_server.h"
#include "server/parameter_service.h"

namespace ps {

// A friend of ParameterServer (server/parameter_server.h).
class ParameterServerTestPeer {
 public:
  // Faults injected into the replies of `server`'s applied pushes (delayed or
  // dropped), to prove exactly-once application. Call before Start.
  static void SetPushFaults(ParameterServer* server, PushFaultInjector faults) {
    server->push_faults_ = std::move(faults);
  }

  // A server (not started) whose push replies go through `faults`.
  static std::unique_ptr<ParameterServer> WithPushFaults(
      ParameterServerOptions options, PushFaultInjector faults) {
    auto server = std::make_unique<ParameterServer>(std::move(options));
    SetPushFaults(server.get(), std::move(faults));
    return server;
  }
};

}  // namespace ps

#endif  // PS_TESTS_TESTING_PARAMETER_SERVER_TEST_PEER_H_

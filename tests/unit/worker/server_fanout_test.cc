// ServerFanout's choice of what to retry (worker/server_fanout.h): a
// CANCELLED the request did not cause (a server's gRPC shutdown cancelling a
// call it held) is retried as UNAVAILABLE is; a CANCELLED after Cancel()
// ends the request; a refusal ends it at once, whatever the calls it
// cancelled answered. The calls are the test's own (no network): each
// answers from a script of statuses per server.
#include "worker/server_fanout.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Runs one request over servers "a" and "b" whose calls answer, attempt
// after attempt, the statuses `script[server]` gives (OK once it runs out);
// `on_call` runs before each answer. Returns the outcome and counts the
// calls made to each server in `calls`.
absl::Status RunRequest(
    std::map<int, std::vector<absl::Status>> script, std::vector<int>* calls,
    const std::function<void(ServerFanout&)>& on_call = nullptr) {
  static const std::vector<std::string> kServers = {"a", "b"};
  ServerFanoutOptions options;
  options.what = "push of clock 0";
  options.servers = &kServers;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(1);
  options.retry_window = absl::Seconds(30);
  calls->assign(kServers.size(), 0);
  absl::Mutex mu;
  std::shared_ptr<ServerFanout> fanout;
  absl::Status outcome;
  absl::Notification done;
  fanout = ServerFanout::Create(
      options,
      [&](int server, grpc::ClientContext*,
          const ServerFanout::CallDone& call_done) {
        absl::Status status;
        {
          absl::MutexLock lock(&mu);
          const int n = (*calls)[server]++;
          const std::vector<absl::Status>& answers = script[server];
          if (n < static_cast<int>(answers.size())) status = answers[n];
        }
        if (on_call) on_call(*fanout);
        call_done(std::move(status));
      },
      nullptr,
      [&](absl::Status status) {
        outcome = std::move(status);
        done.Notify();
      });
  fanout->Start();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  return outcome;
}

TEST(ServerFanoutTest, RetriesACancelledItDidNotCause) {
  std::vector<int> calls;
  const absl::Status outcome =
      RunRequest({{1,
                   {absl::CancelledError("cancelled by the server's shutdown"),
                    absl::UnavailableError("server restarting")}}},
                 &calls);
  EXPECT_TRUE(outcome.ok()) << outcome;
  // Server a answered at once; b was called again twice.
  EXPECT_EQ(calls, (std::vector<int>{1, 3}));
}

TEST(ServerFanoutTest, ACancelledAfterCancelEndsTheRequest) {
  std::vector<int> calls;
  const absl::Status outcome =
      RunRequest({{0, {absl::CancelledError("push cancelled")}}}, &calls,
                 [](ServerFanout& fanout) { fanout.Cancel(); });
  EXPECT_TRUE(absl::IsCancelled(outcome)) << outcome;
  EXPECT_EQ(calls, (std::vector<int>{1, 1}));
}

TEST(ServerFanoutTest, ARefusalEndsTheRequestWhateverTheCancelledCallsSay) {
  std::vector<int> calls;
  // b's CANCELLED stands for the call the refusal cancelled.
  const absl::Status outcome =
      RunRequest({{0, {absl::InvalidArgumentError("gradients: bad block")}},
                  {1, {absl::CancelledError("push cancelled")}}},
                 &calls);
  EXPECT_TRUE(absl::IsInvalidArgument(outcome)) << outcome;
  EXPECT_NE(outcome.message().find("from server a"), std::string::npos)
      << outcome;
  EXPECT_EQ(calls, (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace ps

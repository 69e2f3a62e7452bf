// ParameterClient: asking every server at once (worker/server_fanout.h),
// with deadlines and retries; the requests in flight, which Cancel() ends;
// and the log of servers that stop and start answering.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "worker/parameter_client.h"

namespace ps {

void ParameterClient::Cancel() {
  std::vector<std::shared_ptr<ServerFanout>> live;
  {
    absl::MutexLock lock(&live_mu_);
    cancelled_ = true;
    for (const auto& [id, request] : live_) {
      if (auto fanout = request.lock()) live.push_back(std::move(fanout));
    }
  }
  // Outside live_mu_: a cancelled call's callback may run inline, and its
  // request's end takes live_mu_.
  for (const auto& fanout : live) fanout->Cancel();
}

void ParameterClient::AskAllServers(std::string what, absl::Duration timeout,
                                    absl::Duration retry_window,
                                    ServerFanout::Call call, Done done) {
  ServerFanoutOptions options;
  options.what = what;
  options.servers = &addresses_;
  options.timeout = timeout;
  options.retry_window = retry_window;
  options.stop = stop_;
  int64_t id;
  {
    absl::MutexLock lock(&live_mu_);
    id = next_request_++;
  }
  std::shared_ptr<ServerFanout> fanout = ServerFanout::Create(
      std::move(options), std::move(call),
      [this, what = std::move(what)](int server, const absl::Status& status) {
        NoteReachability(server, what, status);
      },
      [this, id, done = std::move(done)](absl::Status status) mutable {
        {
          absl::MutexLock lock(&live_mu_);
          live_.erase(id);
        }
        std::move(done)(std::move(status));
      });
  bool cancelled;
  {
    absl::MutexLock lock(&live_mu_);
    cancelled = cancelled_;
    if (!cancelled) live_[id] = fanout;
  }
  // A cancelled client's request ends at its first attempt, with CANCELLED.
  if (cancelled) fanout->Cancel();
  fanout->Start();
}

void ParameterClient::NoteReachability(int server, const std::string& what,
                                       const absl::Status& status) {
  absl::MutexLock lock(&reach_mu_);
  absl::Time& since = failing_since_[server];
  if (status.ok()) {
    if (since != absl::InfiniteFuture()) {
      PS_LOG_INFO("server ", addresses_[server], " answers again after ",
                  absl::FormatDuration(absl::Trunc(absl::Now() - since,
                                                   absl::Milliseconds(100))));
      since = absl::InfiniteFuture();
    }
  } else if (since == absl::InfiniteFuture() &&
             status.code() == absl::StatusCode::kUnavailable) {
    // Only UNAVAILABLE: DEADLINE_EXCEEDED is also a read that waited for the
    // staleness bound longer than one call's deadline.
    since = absl::Now();
    PS_LOG_WARNING("server ", addresses_[server], " not answering (", what,
                   ": ", status.ToString(), "); retrying for up to ",
                   absl::FormatDuration(options_.retry_window));
  }
}

}  // namespace ps

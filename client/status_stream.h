// Following a server's status stream (WatchJob, WatchSweep) until what it
// describes has ended, reconnecting as psctl watch must.
#ifndef PS_CLIENT_STATUS_STREAM_H_
#define PS_CLIENT_STATUS_STREAM_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "common/retry.h"
#include "grpcpp/grpcpp.h"

namespace ps {

// Reads the stream `open` starts on a context (whose deadline it leaves to
// this function), calling `on_update` with each status, until a status
// `ended` accepts has arrived; returns that last status. The stream is
// opened again after a retryable failure, or when it ends before the job or
// sweep does; data arriving starts the backoff and the window again (the
// connection is healthy). Errors: the last failure once `reconnect_window`
// has passed without data, or a failure that is not retryable.
template <typename Status>
absl::StatusOr<Status> FollowStatusStream(
    const std::function<std::unique_ptr<grpc::ClientReaderInterface<Status>>(
        grpc::ClientContext*)>& open,
    bool (*ended)(const Status&),
    const std::function<void(const Status&)>& on_update,
    absl::Duration reconnect_window) {
  Retrier retry({.initial_backoff = absl::Milliseconds(200),
                 .max_backoff = absl::Seconds(3),
                 .window = reconnect_window});
  Status last;
  absl::Status status = retry.Run(
      [&] {
        grpc::ClientContext ctx;
        // A watch is long-lived; its deadline bounds one stream, not the job.
        SetDeadline(&ctx, absl::Hours(24));
        std::unique_ptr<grpc::ClientReaderInterface<Status>> reader =
            open(&ctx);
        Status update;
        bool done = false;
        while (reader->Read(&update)) {
          on_update(update);
          last = update;
          done = ended(update);
          retry.Progress();
        }
        absl::Status finish = FromGrpcStatus(reader->Finish());
        if (done) return absl::OkStatus();
        return finish.ok() ? absl::UnavailableError("watch stream ended early")
                           : finish;
      },
      [](const absl::Status& s) { return IsRetryable(s); });
  if (!status.ok()) return status;
  return last;
}

}  // namespace ps

#endif  // PS_CLIENT_STATUS_STREAM_H_

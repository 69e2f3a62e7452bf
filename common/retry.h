// One retry loop for calls that may fail for a while (a peer restarting, a
// network partition): exponential backoff with full jitter between attempts,
// an optional window after which no new attempt starts, and a caller's
// predicate for which failures are worth another attempt.
#ifndef PS_COMMON_RETRY_H_
#define PS_COMMON_RETRY_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"

namespace ps {

// How Retrier spaces and bounds its attempts.
struct RetryOptions {
  // Ceiling of the first delay (Backoff's initial). Default 100 ms.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  // Largest ceiling of a delay (Backoff's max). Default 2 s.
  absl::Duration max_backoff = absl::Seconds(2);
  // No new attempt starts once this long has passed since Run() began (or
  // since the last Progress()). Default: no limit.
  absl::Duration window = absl::InfiniteDuration();
};

// Runs an attempt until it succeeds or retrying ends. Not thread-safe: one
// Run() at a time, and Progress() only from inside its attempt.
//
//   Retrier retry(options);
//   absl::Status s = retry.Run([&] { return CallOnce(); },
//                              [&](const absl::Status& s) { return
//                              IsRetryable(s); });
class Retrier {
 public:
  // Sleeps `delay`; returns false to end the retries (the caller is stopping).
  using SleepFn = absl::FunctionRef<bool(absl::Duration)>;

  explicit Retrier(RetryOptions options = {});

  // Calls `attempt` until it returns OK; after a failure, ends with that
  // status if the window has passed, or else if `should_retry(status)` is
  // false (it is asked only when another attempt would be in time, so it may
  // log the retry), or else if `sleep(backoff delay)` returns false. Returns
  // OK or the last attempt's status.
  absl::Status Run(absl::FunctionRef<absl::Status()> attempt,
                   absl::FunctionRef<bool(const absl::Status&)> should_retry);
  absl::Status Run(absl::FunctionRef<absl::Status()> attempt,
                   absl::FunctionRef<bool(const absl::Status&)> should_retry,
                   SleepFn sleep);

  // Called by an attempt that made progress (a stream delivered data): the
  // backoff and the window start again.
  void Progress();

 private:
  const RetryOptions options_;
  Backoff backoff_;
  absl::Time window_start_;
};

}  // namespace ps

#endif  // PS_COMMON_RETRY_H_

#include "common/retry.h"

namespace ps {

Retrier::Retrier(RetryOptions options)
    : options_(options),
      backoff_(options.initial_backoff, options.max_backoff) {}

absl::Status Retrier::Run(
    absl::FunctionRef<absl::Status()> attempt,
    absl::FunctionRef<bool(const absl::Status&)> should_retry) {
  return Run(attempt, should_retry, [](absl::Duration delay) {
    absl::SleepFor(delay);
    return true;
  });
}

absl::Status Retrier::Run(
    absl::FunctionRef<absl::Status()> attempt,
    absl::FunctionRef<bool(const absl::Status&)> should_retry, SleepFn sleep) {
  backoff_.Reset();
  window_start_ = absl::Now();
  while (true) {
    absl::Status status = attempt();
    if (status.ok()) return status;
    if (absl::Now() - window_start_ > options_.window) return status;
    if (!should_retry(status)) return status;
    if (!sleep(backoff_.Next())) return status;
  }
}

void Retrier::Progress() {
  backoff_.Reset();
  window_start_ = absl::Now();
}

}  // namespace ps

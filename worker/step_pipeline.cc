#include "worker/step_pipeline.h"

#include <utility>

#include "common/logging.h"

namespace ps {

void PendingCall::Start(int64_t clock,
                        absl::FunctionRef<void(ParameterClient::Done)> start,
                        std::function<void(const absl::Status&)> on_error) {
  {
    absl::MutexLock lock(&mu_);
    PS_CHECK(!busy_);
    busy_ = true;
    clock_ = clock;
    start_ = absl::Now();
    result_.reset();
  }
  // The callback may run before start() returns (inline, on this thread).
  start([this, on_error = std::move(on_error)](absl::Status status) {
    if (!status.ok() && on_error) on_error(status);
    absl::MutexLock lock(&mu_);
    result_ = Result{clock_, std::move(status), absl::Now() - start_};
  });
}

PendingCall::Result PendingCall::Wait() {
  absl::MutexLock lock(&mu_);
  if (!busy_) return Result();
  mu_.Await(absl::Condition(
      +[](std::optional<Result>* r) { return r->has_value(); }, &result_));
  Result result = *std::move(result_);
  result_.reset();
  busy_ = false;
  return result;
}

bool PendingCall::busy() const {
  absl::MutexLock lock(&mu_);
  return busy_;
}

}  // namespace ps

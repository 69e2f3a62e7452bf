#include "worker/step_pipeline.h"

#include <utility>

#include "common/logging.h"

namespace ps {

BackgroundCall::BackgroundCall() : thread_([this] { Loop(); }) {}

BackgroundCall::~BackgroundCall() {
  Wait();
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  thread_.join();
}

void BackgroundCall::Start(int64_t clock, std::function<absl::Status()> call) {
  absl::MutexLock lock(&mu_);
  PS_CHECK(!job_.has_value() && !result_.has_value());
  job_ = Job{clock, std::move(call), absl::Now()};
}

BackgroundCall::Result BackgroundCall::Wait() {
  absl::MutexLock lock(&mu_);
  if (!job_.has_value()) return Result();
  mu_.Await(absl::Condition(
      +[](std::optional<Result>* r) { return r->has_value(); }, &result_));
  Result result = *std::move(result_);
  result_.reset();
  job_.reset();
  return result;
}

bool BackgroundCall::busy() const {
  absl::MutexLock lock(&mu_);
  return job_.has_value();
}

void BackgroundCall::Loop() {
  while (true) {
    int64_t clock;
    std::function<absl::Status()> call;
    absl::Time start;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BackgroundCall::HasWork));
      if (shutdown_) return;  // Only after Wait(): no call in flight.
      clock = job_->clock;
      call = job_->call;
      start = job_->start;
    }
    absl::Status status = call();
    absl::MutexLock lock(&mu_);
    result_ = Result{clock, std::move(status), absl::Now() - start};
  }
}

}  // namespace ps

#include "worker/async_pusher.h"

#include "common/logging.h"

namespace ps {

AsyncPusher::AsyncPusher(ParameterClient* client)
    : client_(client), thread_([this] { Loop(); }) {}

AsyncPusher::~AsyncPusher() {
  Wait();
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  thread_.join();
}

void AsyncPusher::Start(int64_t clock,
                        const std::vector<std::vector<float>>* grads) {
  absl::MutexLock lock(&mu_);
  PS_CHECK(!job_.has_value() && !result_.has_value());
  job_ = Job{clock, grads, absl::Now()};
}

AsyncPusher::Result AsyncPusher::Wait() {
  absl::MutexLock lock(&mu_);
  if (!job_.has_value()) return Result();
  mu_.Await(absl::Condition(
      +[](std::optional<Result>* r) { return r->has_value(); }, &result_));
  Result result = *std::move(result_);
  result_.reset();
  job_.reset();
  return result;
}

void AsyncPusher::Loop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &AsyncPusher::HasWork));
      if (shutdown_) return;  // Only after Wait(): no push in flight.
      job = *job_;
    }
    absl::Status status = client_->Push(job.clock, *job.grads);
    absl::MutexLock lock(&mu_);
    result_ = Result{job.clock, std::move(status), absl::Now() - job.start};
  }
}

}  // namespace ps

// The trainer's pipeline (docs/compute.md, "A step's timeline"): a step's
// push and the next step's pull run on threads of their own while the
// trainer computes.
#ifndef PS_WORKER_STEP_PIPELINE_H_
#define PS_WORKER_STEP_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/parameter_client.h"

namespace ps {

// Runs one call at a time on a thread of its own: Start() hands it over,
// Wait() waits for it to end. Start and Wait are called from one thread.
class BackgroundCall {
 public:
  BackgroundCall();
  // Waits for the call in flight, if any.
  ~BackgroundCall();

  BackgroundCall(const BackgroundCall&) = delete;
  BackgroundCall& operator=(const BackgroundCall&) = delete;

  // Starts `call`, labelled with the step `clock` it serves. Requires no call
  // in flight (Wait() first).
  void Start(int64_t clock, std::function<absl::Status()> call);

  // What a finished call reports.
  struct Result {
    int64_t clock = -1;       // -1: there was no call in flight.
    absl::Status status;      // The call's.
    absl::Duration duration;  // From Start to the call's end.
  };
  // Waits for the call in flight to end and returns its result; returns at
  // once (clock -1, OK) when there is none.
  Result Wait();
  // Whether a call was started and not yet waited for.
  bool busy() const;

 private:
  void Loop();
  // The thread has something to do: a call to make, or to exit.
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || (job_.has_value() && !result_.has_value());
  }

  struct Job {
    int64_t clock;
    std::function<absl::Status()> call;
    absl::Time start;
  };
  mutable absl::Mutex mu_;
  // The call handed over and not yet taken by Wait().
  std::optional<Job> job_ ABSL_GUARDED_BY(mu_);
  std::optional<Result> result_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts once the members above exist.
};

// Pushes a step's gradients while the trainer goes on with the next step.
class AsyncPusher {
 public:
  using Result = BackgroundCall::Result;
  // Called on the pushing thread with a push's error as soon as it fails,
  // before Wait() returns it.
  using ErrorCallback = std::function<void(const absl::Status&)>;
  // `client` must outlive the pusher. `on_error` may be null.
  explicit AsyncPusher(ParameterClient* client,
                       ErrorCallback on_error = nullptr)
      : client_(client), on_error_(std::move(on_error)) {}

  // Starts pushing `grads` as the gradients of `clock`. Requires no push in
  // flight. `grads` must not change or go away until Wait() returns.
  void Start(int64_t clock, const std::vector<std::vector<float>>* grads) {
    call_.Start(clock, [this, clock, grads] {
      absl::Status status = client_->Push(clock, *grads);
      if (!status.ok() && on_error_) on_error_(status);
      return status;
    });
  }
  // Waits for the push in flight (BackgroundCall::Wait).
  Result Wait() { return call_.Wait(); }
  bool busy() const { return call_.busy(); }

 private:
  ParameterClient* const client_;
  const ErrorCallback on_error_;
  BackgroundCall call_;  // Last: ends (waits) first.
};

// Pulls the next step's parameters while the trainer computes this one.
// While a pull is in flight the trainer must not use the client's Pull or
// ResumeClock itself.
class AsyncPuller {
 public:
  using Result = BackgroundCall::Result;
  // `client` must outlive the puller.
  explicit AsyncPuller(ParameterClient* client) : client_(client) {}

  // Starts pulling the parameters of `clock` into `params`, which must not
  // be used until Wait() returns. Requires no pull in flight.
  void Start(int64_t clock, std::vector<std::vector<float>>* params) {
    call_.Start(clock,
                [this, clock, params] { return client_->Pull(clock, params); });
  }
  // Waits for the pull in flight (BackgroundCall::Wait).
  Result Wait() { return call_.Wait(); }
  bool busy() const { return call_.busy(); }

 private:
  ParameterClient* const client_;
  BackgroundCall call_;  // Last: ends (waits) first.
};

}  // namespace ps

#endif  // PS_WORKER_STEP_PIPELINE_H_

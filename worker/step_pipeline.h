// The trainer's pipeline (docs/compute.md, "A step's timeline"): a step's
// push and the next step's pull are in flight, on gRPC's callback API, while
// the trainer computes. No thread of their own: the trainer starts a call
// and later waits for the callback that ended it.
#ifndef PS_WORKER_STEP_PIPELINE_H_
#define PS_WORKER_STEP_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/parameter_client.h"

namespace ps {

// One asynchronous call at a time: Start() makes it, Wait() waits for its
// callback. Start and Wait are called from one thread; the callback may run
// on any.
class PendingCall {
 public:
  PendingCall() = default;
  // Waits for the call in flight, if any.
  ~PendingCall() { Wait(); }

  PendingCall(const PendingCall&) = delete;
  PendingCall& operator=(const PendingCall&) = delete;

  // Starts a call, labelled with the step `clock` it serves: `start` makes
  // it and hands its outcome to the callback it is given. `on_error`, if
  // set, sees a failed call's error first, on the callback's thread. Requires
  // no call in flight (Wait() first).
  void Start(int64_t clock,
             absl::FunctionRef<void(ParameterClient::Done)> start,
             std::function<void(const absl::Status&)> on_error = nullptr);

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
  mutable absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  int64_t clock_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  std::optional<Result> result_ ABSL_GUARDED_BY(mu_);
};

// Pushes a step's gradients while the trainer goes on with the next step.
class AsyncPusher {
 public:
  using Result = PendingCall::Result;
  // Called with a push's error as soon as it fails, before Wait() returns
  // it, on the thread that reports the failure (e.g. to cancel a pull that
  // now waits in vain). It must not block.
  using ErrorCallback = std::function<void(const absl::Status&)>;
  // `client` must outlive the pusher. `on_error` may be null.
  explicit AsyncPusher(ParameterClient* client,
                       ErrorCallback on_error = nullptr)
      : client_(client), on_error_(std::move(on_error)) {}

  // Starts pushing `grads` as the gradients of `clock`. Requires no push in
  // flight. `grads` must not change or go away until Wait() returns.
  void Start(int64_t clock, const std::vector<std::vector<float>>* grads) {
    call_.Start(
        clock,
        [&](ParameterClient::Done done) {
          client_->PushAsync(clock, grads, std::move(done));
        },
        on_error_);
  }
  // Waits for the push in flight (PendingCall::Wait).
  Result Wait() { return call_.Wait(); }
  bool busy() const { return call_.busy(); }

 private:
  ParameterClient* const client_;
  const ErrorCallback on_error_;
  PendingCall call_;  // Last: ends (waits) first.
};

// Pulls the next step's parameters while the trainer computes this one.
// While a pull is in flight the trainer must not use the client's Pull or
// ResumeClock itself.
class AsyncPuller {
 public:
  using Result = PendingCall::Result;
  // `client` must outlive the puller.
  explicit AsyncPuller(ParameterClient* client) : client_(client) {}

  // Starts pulling the parameters of `clock` into `params`, which must not
  // be used until Wait() returns. Requires no pull in flight.
  void Start(int64_t clock, std::vector<std::vector<float>>* params) {
    call_.Start(clock, [&](ParameterClient::Done done) {
      client_->PullAsync(clock, params, std::move(done));
    });
  }
  // Waits for the pull in flight (PendingCall::Wait).
  Result Wait() { return call_.Wait(); }
  bool busy() const { return call_.busy(); }

 private:
  ParameterClient* const client_;
  PendingCall call_;  // Last: ends (waits) first.
};

}  // namespace ps

#endif  // PS_WORKER_STEP_PIPELINE_H_

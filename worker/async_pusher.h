// Pushes a step's gradients on a thread of its own, so that the push
// overlaps the next step's pull and computation (the trainer's pipeline,
// docs/architecture.md).
#ifndef PS_WORKER_ASYNC_PUSHER_H_
#define PS_WORKER_ASYNC_PUSHER_H_

#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/parameter_client.h"

namespace ps {

// One push at a time: Start() hands a push to the pushing thread, Wait()
// waits for it to end. Start and Wait are called from one thread (the
// trainer's), which may use the client's Pull meanwhile.
class AsyncPusher {
 public:
  // `client` must outlive the pusher.
  explicit AsyncPusher(ParameterClient* client);
  // Waits for the push in flight, if any.
  ~AsyncPusher();

  AsyncPusher(const AsyncPusher&) = delete;
  AsyncPusher& operator=(const AsyncPusher&) = delete;

  // Starts pushing `grads` as the gradients of `clock`. Requires no push in
  // flight (Wait() first). `grads` must not change or go away until Wait()
  // returns.
  void Start(int64_t clock, const std::vector<std::vector<float>>* grads);

  // What a finished push reports.
  struct Result {
    int64_t clock = -1;       // -1: there was no push in flight.
    absl::Status status;      // ParameterClient::Push's.
    absl::Duration duration;  // From Start to the push's end.
  };
  // Waits for the push in flight to end and returns its result; returns at
  // once (clock -1, OK) when there is none.
  Result Wait();

 private:
  void Loop();
  // The pushing thread has something to do: a push to make, or to exit.
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || (job_.has_value() && !result_.has_value());
  }

  ParameterClient* const client_;
  mutable absl::Mutex mu_;
  // The push handed over and not yet taken by Wait().
  struct Job {
    int64_t clock;
    const std::vector<std::vector<float>>* grads;
    absl::Time start;
  };
  std::optional<Job> job_ ABSL_GUARDED_BY(mu_);
  std::optional<Result> result_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts once the members above exist.
};

}  // namespace ps

#endif  // PS_WORKER_ASYNC_PUSHER_H_

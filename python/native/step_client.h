// The Python SDK's compiled transport (paramserver._native, docs/python.md,
// "The compiled transport"): a dense step's push and pull through the C++
// worker's ParameterClient (worker/parameter_client.h) — its gRPC callback
// calls, its same-host shared memory, its retries — started and waited for
// by the Python training thread. Nothing here touches Python: module.cc
// binds it and releases the GIL around every call that copies or waits.
#ifndef PS_PYTHON_NATIVE_STEP_CLIENT_H_
#define PS_PYTHON_NATIVE_STEP_CLIENT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "worker/parameter_client.h"

namespace ps::python {

// How StepClient::Create connects (the Python ParameterClient's arguments).
struct StepClientOptions {
  // Deadlines of one Pull and one Push attempt, and how long retries go on.
  // Defaults: ParameterClientOptions'.
  absl::Duration pull_timeout = absl::Seconds(30);
  absl::Duration push_timeout = absl::Seconds(30);
  absl::Duration retry_window = absl::Seconds(120);
  // Payloads to servers on this host through shared memory. Default true.
  bool shared_payloads = true;
  // TLS and call metadata (the cluster secret). Default: plaintext.
  ChannelSecurity channel;
};

// One call in flight (a push or a pull) and its outcome. Thread-safe.
class CallSlot {
 public:
  // Marks a call started; its outcome is unknown until Finish.
  void Start();
  // Records the outcome (a gRPC thread, or inline).
  void Finish(absl::Status status);
  // Whether a call was started and not yet waited for.
  bool active() const;
  // Waits for the started call's outcome and marks the slot idle. OK if no
  // call was started.
  absl::Status Wait();

 private:
  mutable absl::Mutex mu_;
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// A dense job's pushes and pulls of one worker, over flat float32 vectors of
// every tensor in the model's order (the Python SDK's layout).
// Threads: one thread starts and finishes calls (the training thread); one
// push and one pull may be in flight at once; Cancel from any thread.
class StepClient {
 public:
  // `assignment`: the worker's (its spec and shard map). Errors:
  // INVALID_ARGUMENT for a spec whose tensors cannot be laid out, or a shard
  // map that does not match them.
  static absl::StatusOr<std::unique_ptr<StepClient>> Create(
      const v1::Assignment& assignment, StepClientOptions options);
  // Cancels the calls in flight and waits for them to end.
  ~StepClient();

  // Values in the flat vector, and per tensor.
  int64_t size() const { return size_; }
  const std::vector<int64_t>& tensor_sizes() const { return sizes_; }

  // Starts the push of `clock`'s gradients (`size()` values, copied before
  // this returns). Errors: FAILED_PRECONDITION if a push is in flight;
  // INVALID_ARGUMENT for a wrong length.
  absl::Status StartPush(int64_t clock, std::span<const float> grads);
  // Waits for the push started last: the servers' error once retries are
  // exhausted, CANCELLED after Cancel. OK when none was started.
  absl::Status FinishPush();
  // Starts the pull of `clock`'s parameters. Errors: FAILED_PRECONDITION if a
  // pull is in flight.
  absl::Status StartPull(int64_t clock);
  // Waits for the pull started last and copies its values into `out`
  // (`size()` values). Errors: as FinishPush; INVALID_ARGUMENT for a wrong
  // length (the pull is still waited for); FAILED_PRECONDITION when no pull
  // was started.
  absl::Status FinishPull(std::span<float> out);
  // Whether a pull is in flight (started, not finished).
  bool pulling() const { return pull_.active(); }
  // Ends the calls in flight and every later one (CANCELLED). Any thread.
  void Cancel() { client_->Cancel(); }

  // ParameterClient's counters.
  int64_t pushed_bytes() const { return client_->pushed_bytes(); }
  int64_t pulled_bytes() const { return client_->pulled_bytes(); }
  int64_t pulls_made() const { return client_->pulls_made(); }

 private:
  StepClient(std::unique_ptr<ParameterClient> client,
             std::vector<int64_t> sizes);

  std::unique_ptr<ParameterClient> client_;
  std::vector<int64_t> sizes_;
  int64_t size_ = 0;
  // The push's gradients and the pull's values, per tensor: gRPC reads and
  // writes them while a call is in flight.
  std::vector<std::vector<float>> grads_;
  std::vector<std::vector<float>> values_;
  CallSlot push_;
  CallSlot pull_;
};

}  // namespace ps::python

#endif  // PS_PYTHON_NATIVE_STEP_CLIENT_H_

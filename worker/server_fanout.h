// One request to every server of a shard map, made with gRPC's callback API
// and no thread of its own: each attempt calls the servers still to answer in
// parallel, retryable failures are called again after a backoff timed by a
// grpc::Alarm, and the caller hears the outcome once, from a callback.
#ifndef PS_WORKER_SERVER_FANOUT_H_
#define PS_WORKER_SERVER_FANOUT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"

namespace ps {

struct ServerFanoutOptions {
  // Names the request in errors and logs ("push of clock 7").
  std::string what;
  // The servers' addresses, for errors; one call per server. Not null; must
  // outlive the request (the client's list, shared by all its requests).
  const std::vector<std::string>* servers = nullptr;
  // Deadline of one call.
  absl::Duration timeout = absl::Seconds(30);
  // No attempt starts once this long has passed since the first.
  absl::Duration retry_window = absl::Seconds(120);
  // Backoff between attempts (full jitter): 20 ms doubling up to 1 s.
  absl::Duration initial_backoff = absl::Milliseconds(20);
  absl::Duration max_backoff = absl::Seconds(1);
  // If not null, a failed attempt ends the request (with CANCELLED) once
  // this is true.
  const std::atomic<bool>* stop = nullptr;
};

// Lifetime: held by a shared_ptr from Create until the outcome is delivered
// (and by whoever keeps one to Cancel it). Thread-safe.
class ServerFanout : public std::enable_shared_from_this<ServerFanout> {
 public:
  // Called once per call; reports the call's status through `done` exactly
  // once, from any thread. `context` carries the deadline and stays valid
  // until `done` has run.
  using CallDone = std::function<void(absl::Status)>;
  using Call = std::function<void(int server, grpc::ClientContext* context,
                                  CallDone done)>;
  // Sees every call's status, in the thread that reports it (e.g. to log a
  // server that stops answering).
  using Observer = std::function<void(int server, const absl::Status&)>;
  // The request's outcome: OK once every server answered OK; otherwise the
  // first error a retry cannot fix (the other calls are cancelled rather
  // than waited for), CANCELLED, or the last retryable error once the window
  // closed. Errors name `what` and the server.
  using Outcome = absl::AnyInvocable<void(absl::Status) &&>;

  static std::shared_ptr<ServerFanout> Create(ServerFanoutOptions options,
                                              Call call, Observer observer,
                                              Outcome outcome);
  ServerFanout(const ServerFanout&) = delete;
  ServerFanout& operator=(const ServerFanout&) = delete;

  // Makes the first attempt. Once.
  void Start();
  // Ends the request with CANCELLED: the calls in flight are cancelled, a
  // backoff ends at once, no attempt starts. No effect once it has ended.
  void Cancel();

  // Whether a status is worth another attempt: retryable transport errors,
  // and NOT_FOUND (a server learns of a new job on its next heartbeat, so a
  // worker may reach it a moment before it holds the job).
  static bool ShouldRetry(const absl::Status& status);
  // ShouldRetry, and also CANCELLED that this request did not cause (no
  // Cancel()): a server that stops cancels the calls it still holds when
  // its shutdown's grace ends. Safe as DEADLINE_EXCEEDED is: pulls are
  // reads, and a push or seed that did arrive is applied once per (worker,
  // clock) or per job, its repeat acknowledged as a duplicate.
  bool ShouldRetryCall(const absl::Status& status);

 private:
  ServerFanout(ServerFanoutOptions options, Call call, Observer observer,
               Outcome outcome);
  void StartAttempt();
  void CallEnded(size_t i, absl::Status status);
  // Runs once every call of an attempt has ended.
  void AttemptEnded();
  void Deliver(absl::Status status);

  const ServerFanoutOptions options_;
  const Call call_;
  const Observer observer_;
  Outcome outcome_;  // Moved out (once) by Deliver.
  const absl::Time first_attempt_;
  Backoff backoff_;  // Touched only between attempts.
  // The servers the current attempt calls, and its calls' statuses; written
  // between attempts only (while no call is in flight).
  std::vector<int> todo_;
  std::vector<absl::Status> results_;
  std::atomic<int> pending_{0};
  // The first call of this attempt to fail for a reason a retry cannot fix
  // (-1: none yet). Its error is the attempt's.
  std::atomic<int> refused_{-1};

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // One per server; replaced under mu_ when an attempt starts, copied
  // under mu_ by Cancel (which keeps its copies alive while it cancels), and
  // dropped under mu_ before the outcome is delivered. The calls' callbacks
  // read them without it (gRPC may run a cancelled call's callback inline,
  // in TryCancel): during an attempt nothing replaces them.
  //
  // Dropped before delivering because a context holds a reference to its
  // channel: once the outcome is out the client may be destroyed, and this
  // object's last reference is often released on a gRPC thread; a channel
  // whose last reference goes there shuts down gRPC's callback queue from
  // one of that queue's own threads (a double free under ASAN).
  std::vector<std::shared_ptr<grpc::ClientContext>> contexts_;
  // The backoff's timer, and the reference that keeps this object alive
  // until it fires (its callback holds only `this`: a shared_ptr stored in
  // the alarm this object owns would never be released).
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ServerFanout> alarm_hold_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_SERVER_FANOUT_H_

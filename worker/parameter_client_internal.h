// Shared by ParameterClient's files (worker/parameter_client*.cc): what
// more than one of them uses. Not for other users.
#ifndef PS_WORKER_PARAMETER_CLIENT_INTERNAL_H_
#define PS_WORKER_PARAMETER_CLIENT_INTERNAL_H_

#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "worker/parameter_client.h"

namespace ps::parameter_client_internal {

// Starts an asynchronous call and waits for its outcome.
inline absl::Status Await(
    absl::FunctionRef<void(ParameterClient::Done)> start) {
  absl::Notification ended;
  absl::Status outcome;
  start([&](absl::Status status) {
    outcome = std::move(status);
    ended.Notify();
  });
  ended.WaitForNotification();
  return outcome;
}

}  // namespace ps::parameter_client_internal

#endif  // PS_WORKER_PARAMETER_CLIENT_INTERNAL_H_

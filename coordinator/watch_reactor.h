// The server side of a status stream (JobService.WatchJob,
// SweepService.WatchSweep): one watcher's updates, coalesced.
#ifndef PS_COORDINATOR_WATCH_REACTOR_H_
#define PS_COORDINATOR_WATCH_REACTOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/unary_handler.h"
#include "grpcpp/grpcpp.h"

namespace ps {

// Streams the statuses `manager` publishes for one id to one watcher.
// Updates that arrive while a write is in flight are coalesced: only the
// newest is sent next, and the status `is_last` accepts (a job or sweep that
// ended) is always the last message. `Manager` has
//   absl::StatusOr<int64_t> Watch(const std::string& id,
//                                 std::function<void(const Status&)>);
//   void Unwatch(int64_t token);  // No call after it returns.
// The reactor deletes itself when the call is done.
template <typename Status, typename Manager>
class WatchReactor final : public grpc::ServerWriteReactor<Status> {
 public:
  using IsLast = bool (*)(const Status&);

  WatchReactor(Manager* manager, const std::string& id, IsLast is_last)
      : manager_(manager), is_last_(is_last) {
    auto token =
        manager_->Watch(id, [this](const Status& status) { Offer(status); });
    absl::MutexLock lock(&mu_);
    if (!token.ok()) {
      FinishOnce(ToGrpcStatus(token.status()));
      return;
    }
    token_ = *token;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishOnce(
          grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
      return;
    }
    if (finish_after_write_.has_value()) {
      FinishOnce(*finish_after_write_);
    } else if (sent_last_) {
      FinishOnce(grpc::Status::OK);
    } else {
      MaybeWrite();
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    // After Unwatch returns the manager never calls Offer again.
    int64_t token;
    {
      absl::MutexLock lock(&mu_);
      token = token_;
    }
    if (token != 0) manager_->Unwatch(token);
    delete this;
  }

 private:
  // Called by the manager (under its lock) with each new status.
  void Offer(const Status& status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    pending_ = status;
    MaybeWrite();
  }

  void MaybeWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || !pending_.has_value()) return;
    current_ = *std::move(pending_);
    pending_.reset();
    writing_ = true;
    sent_last_ = is_last_(current_);
    this->StartWrite(&current_);
  }

  // Finishes the call now, or right after the write in flight completes.
  void FinishOnce(const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (writing_) {
      if (!finish_after_write_.has_value()) finish_after_write_ = status;
      return;
    }
    finished_ = true;
    this->Finish(status);
  }

  Manager* const manager_;
  const IsLast is_last_;
  absl::Mutex mu_;
  int64_t token_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<Status> pending_ ABSL_GUARDED_BY(mu_);
  Status current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_last_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_after_write_ ABSL_GUARDED_BY(mu_);
};

// A watch refused before it starts.
template <typename Status>
class RefusedWatch final : public grpc::ServerWriteReactor<Status> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace ps

#endif  // PS_COORDINATOR_WATCH_REACTOR_H_

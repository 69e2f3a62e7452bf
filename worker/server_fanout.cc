#include "worker/server_fanout.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_details.h"

namespace ps {

bool ServerFanout::ShouldRetry(const absl::Status& status) {
  return IsRetryable(status) || absl::IsNotFound(status);
}

bool ServerFanout::ShouldRetryCall(const absl::Status& status) {
  if (ShouldRetry(status)) return true;
  if (!absl::IsCancelled(status)) return false;
  // Cancelled by us (Cancel), or else by the server or the transport.
  absl::MutexLock lock(&mu_);
  return !cancelled_;
}

std::shared_ptr<ServerFanout> ServerFanout::Create(ServerFanoutOptions options,
                                                   Call call, Observer observer,
                                                   Outcome outcome) {
  return std::shared_ptr<ServerFanout>(
      new ServerFanout(std::move(options), std::move(call), std::move(observer),
                       std::move(outcome)));
}

ServerFanout::ServerFanout(ServerFanoutOptions options, Call call,
                           Observer observer, Outcome outcome)
    : options_(std::move(options)),
      call_(std::move(call)),
      observer_(std::move(observer)),
      outcome_(std::move(outcome)),
      first_attempt_(absl::Now()),
      backoff_(options_.initial_backoff, options_.max_backoff),
      contexts_(options_.servers->size()) {
  todo_.reserve(options_.servers->size());
  for (size_t s = 0; s < options_.servers->size(); ++s) todo_.push_back(s);
}

void ServerFanout::Start() { StartAttempt(); }

void ServerFanout::Cancel() {
  std::vector<std::shared_ptr<grpc::ClientContext>> contexts;
  grpc::Alarm* alarm = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    for (const auto& context : contexts_) {
      if (context != nullptr) contexts.push_back(context);
    }
    alarm = alarm_.get();
  }
  // Outside mu_: either may run a callback inline. The contexts are our
  // copies; the alarm is replaced only by an attempt that starts, and none
  // starts once cancelled_ is set.
  for (const auto& context : contexts) context->TryCancel();
  if (alarm != nullptr) alarm->Cancel();
}

void ServerFanout::StartAttempt() {
  std::vector<std::pair<int, grpc::ClientContext*>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      for (int s : todo_) {
        contexts_[s] = std::make_shared<grpc::ClientContext>();
        SetDeadline(contexts_[s].get(), options_.timeout);
        calls.emplace_back(s, contexts_[s].get());
      }
    }
  }
  if (calls.empty()) {  // Cancelled.
    Deliver(absl::CancelledError(absl::StrCat(options_.what, " cancelled")));
    return;
  }
  results_.assign(calls.size(), absl::OkStatus());
  refused_.store(-1);
  pending_.store(static_cast<int>(calls.size()));
  // From here the calls' callbacks may end the attempt (and start the
  // next): only the local `calls` is read.
  const std::shared_ptr<ServerFanout> self = shared_from_this();
  for (size_t i = 0; i < calls.size(); ++i) {
    call_(calls[i].first, calls[i].second, [self, i](absl::Status status) {
      self->CallEnded(i, std::move(status));
    });
  }
}

void ServerFanout::CallEnded(size_t i, absl::Status status) {
  if (observer_) observer_(todo_[i], status);
  int none = -1;
  // The calls cancelled below, after a refusal, end CANCELLED and count as
  // retryable here: the refusal, recorded first, is the attempt's error.
  if (!status.ok() && !ShouldRetryCall(status) &&
      refused_.compare_exchange_strong(none, static_cast<int>(i))) {
    // A call parked on a server (a pull waiting for a clock this failure
    // keeps from advancing) would otherwise hold the attempt until its
    // deadline.
    for (size_t j = 0; j < todo_.size(); ++j) {
      if (j != i) contexts_[todo_[j]]->TryCancel();
    }
  }
  results_[i] = std::move(status);
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) AttemptEnded();
}

void ServerFanout::AttemptEnded() {
  if (const int r = refused_.load(); r >= 0) {
    const absl::Status& s = results_[r];
    Deliver(Rewrapped(
        s, absl::StrCat(options_.what, " from server ",
                        (*options_.servers)[todo_[r]], ": ", s.message())));
    return;
  }
  std::vector<int> failed;
  absl::Status last;
  int last_server = -1;
  for (size_t i = 0; i < todo_.size(); ++i) {
    if (results_[i].ok()) continue;
    failed.push_back(todo_[i]);
    last = results_[i];
    last_server = todo_[i];
  }
  if (failed.empty()) {
    Deliver(absl::OkStatus());
    return;
  }
  if (options_.stop != nullptr && options_.stop->load()) {
    Deliver(absl::CancelledError(
        absl::StrCat(options_.what, " cancelled: job stopped")));
    return;
  }
  if (absl::Now() - first_attempt_ > options_.retry_window) {
    Deliver(Rewrapped(
        last,
        absl::StrCat(options_.what, " failed after retrying for ",
                     absl::FormatDuration(options_.retry_window), ": server ",
                     (*options_.servers)[last_server], ": ", last.message())));
    return;
  }
  todo_ = std::move(failed);
  absl::Duration delay = backoff_.Next();
  // A server stopped for a move of the job's servers (ClockTable::CheckPush)
  // takes requests again, or refuses the old map, the moment the move ends,
  // well within a second: retry within the first step's delay rather than a
  // grown one, so that the worker goes on as soon as it can.
  if (absl::IsUnavailable(last) &&
      absl::StrContains(last.message(), "servers are moving")) {
    delay = std::min(delay, options_.initial_backoff);
  }
  const absl::Time wake = absl::Now() + delay;
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      alarm_ = std::make_unique<grpc::Alarm>();
      alarm_hold_ = shared_from_this();
      // Fires at `wake`, or at once (ok = false) when Cancel cancels it;
      // either way the next attempt decides. gRPC runs alarm callbacks on
      // its own threads, never inline in Set or Cancel.
      alarm_->Set(absl::ToChronoTime(wake), [this](bool /*ok*/) {
        std::shared_ptr<ServerFanout> self;
        {
          absl::MutexLock lock(&mu_);
          self = std::move(alarm_hold_);
        }
        StartAttempt();
      });
      return;
    }
  }
  Deliver(absl::CancelledError(absl::StrCat(options_.what, " cancelled")));
}

void ServerFanout::Deliver(absl::Status status) {
  {
    // See contexts_: no channel reference may outlive the outcome here.
    absl::MutexLock lock(&mu_);
    contexts_.clear();
  }
  std::move(outcome_)(std::move(status));
}

}  // namespace ps

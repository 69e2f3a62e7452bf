#include "server/waiting_requests.h"

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Holds `entry` in `held`; first, if kMaxPerWorker entries of its worker
// are held already, moves the oldest of them into `failed` with
// RESOURCE_EXHAUSTED (`what`: "pulls" or "pushes").
template <typename T, typename Failed>
void HoldBounded(T entry, std::vector<T>& held, const char* what,
                 const std::string& job_id, int max, Failed& failed) {
  auto oldest = held.end();
  int count = 0;
  for (auto it = held.begin(); it != held.end(); ++it) {
    if (it->worker != entry.worker) continue;
    if (count++ == 0) oldest = it;
  }
  if (count >= max) {
    failed.emplace_back(
        std::move(oldest->done),
        absl::ResourceExhaustedError(
            absl::StrCat("worker_index: worker ", entry.worker,
                         " has more than ", max, " waiting ", what, " on job ",
                         job_id, " on this server; the oldest was dropped")));
    held.erase(oldest);
  }
  held.push_back(std::move(entry));
}

// Moves the entries `release` takes out of `held`, keeping the others in
// order.
template <typename T, typename Fn>
void ReleaseWhere(std::vector<T>& held, Fn release) {
  auto keep = held.begin();
  for (auto it = held.begin(); it != held.end(); ++it) {
    if (release(*it)) continue;
    if (keep != it) *keep = std::move(*it);
    ++keep;
  }
  held.erase(keep, held.end());
}

}  // namespace

void ReadyCallbacks::Run() {
  for (auto& [callback, reply] : pulls) callback(std::move(reply));
  for (auto& [callback, reply] : pushes) callback(std::move(reply));
  for (auto& [callback, reply] : seeds) callback(std::move(reply));
  for (auto& work : later) std::move(work)();
}

void WaitingRequests::ParkPull(WaitingPull pull, ReadyCallbacks* ready) {
  HoldBounded(std::move(pull), pulls_, "pulls", job_id_, max_per_worker_,
              ready->pulls);
}

void WaitingRequests::ParkPush(ParkedPush push, ReadyCallbacks* ready) {
  HoldBounded(std::move(push), pushes_, "pushes", job_id_, max_per_worker_,
              ready->pushes);
}

void WaitingRequests::ParkSeed(SeedCallback done, bool duplicate) {
  seeds_.emplace_back(std::move(done), duplicate);
}

void WaitingRequests::ReleasePulls(
    absl::FunctionRef<bool(const WaitingPull&)> can_read,
    absl::FunctionRef<void(WaitingPull&, ReadyCallbacks*)> answer,
    absl::FunctionRef<void(absl::Duration)> observe_wait,
    ReadyCallbacks* ready) {
  const absl::Time now = absl::Now();
  ReleaseWhere(pulls_, [&](WaitingPull& pull) {
    if (!can_read(pull)) return false;
    observe_wait(now - pull.since);
    answer(pull, ready);
    return true;
  });
}

void WaitingRequests::ReleasePushes(
    const std::vector<int64_t>& durable_clocks,
    absl::FunctionRef<bool(const ParkedPush&)> part_durable,
    absl::FunctionRef<void(absl::Duration)> observe_wait,
    ReadyCallbacks* ready) {
  const absl::Time now = absl::Now();
  ReleaseWhere(pushes_, [&](ParkedPush& push) {
    if (push.clock >= durable_clocks[push.worker] &&
        (push.positions.empty() || !part_durable(push))) {
      return false;
    }
    observe_wait(now - push.since);
    v1::PushResponse response;
    response.set_duplicate(push.duplicate);
    ready->pushes.emplace_back(std::move(push.done), std::move(response));
    return true;
  });
}

void WaitingRequests::ReleaseSeeds(ReadyCallbacks* ready) {
  for (auto& [done, duplicate] : seeds_) {
    v1::SeedResponse response;
    response.set_duplicate(duplicate);
    ready->seeds.emplace_back(std::move(done), std::move(response));
  }
  seeds_.clear();
}

void WaitingRequests::FailAll(const absl::Status& reason,
                              ReadyCallbacks* ready) {
  for (WaitingPull& pull : pulls_) {
    ready->pulls.emplace_back(std::move(pull.done), reason);
  }
  for (ParkedPush& push : pushes_) {
    ready->pushes.emplace_back(std::move(push.done), reason);
  }
  for (auto& [done, duplicate] : seeds_) {
    ready->seeds.emplace_back(std::move(done), reason);
  }
  pulls_.clear();
  pushes_.clear();
  seeds_.clear();
}

}  // namespace ps

// ParameterClient: the pipelined step (ConsistencySpec.pipeline_parts;
// docs/consistency.md, "The pipelined step"). A step's push goes as parts,
// the last layer's blocks first (the order backward produces them), at most
// two parts in flight so that the first ones reach the servers whole
// instead of sharing the link with all the others; the next step's pull
// asks for every part at once, the first layer's first (the order forward
// needs them), and the servers answer each part as soon as its blocks are
// applied. The pull's replies then cross the servers' links while the
// push's later parts still cross the worker's.
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "worker/parameter_client.h"

namespace ps {
// Most parts of one push in flight at once.
constexpr int kPartsInFlight = 2;

// Parts of one request, some in flight: which to start next, the first
// error, and the caller's `done` once every started part has ended.
// Thread-safe.
class PartsInFlight {
 public:
  PartsInFlight(int parts, ParameterClient::Done done)
      : parts_(parts), done_(std::move(done)) {}

  // Takes the next part to start (its index in start order) while fewer
  // than `limit` have started; false otherwise.
  bool TakeFirst(int limit, int* taken) {
    absl::MutexLock lock(&mu_);
    if (started_ >= std::min(limit, parts_)) return false;
    *taken = started_++;
    ++in_flight_;
    return true;
  }
  // A part ended with `status`. Returns true, with the part to start in
  // `taken`, while no part failed and parts are left; sets `deliver` once
  // the last part in flight has ended (then call Deliver).
  bool Ended(absl::Status status, bool* deliver, int* taken) {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (!status.ok() && status_.ok()) status_ = std::move(status);
    const bool next = status_.ok() && started_ < parts_;
    if (next) {
      *taken = started_++;
      ++in_flight_;
    }
    *deliver = in_flight_ == 0;
    return next;
  }
  // Reports the outcome: OK, or the first part's error.
  void Deliver() {
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      status = status_;
    }
    std::move(done_)(std::move(status));
  }

 private:
  absl::Mutex mu_;
  const int parts_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  ParameterClient::Done done_;
};

void ParameterClient::CutIntoParts(int parts) {
  parts_.assign(static_cast<size_t>(parts), Part(servers_.size()));
  for (size_t s = 0; s < servers_.size(); ++s) {
    const std::vector<BlockRef>& blocks = servers_[s].blocks;
    int64_t total = 0;
    for (const BlockRef& b : blocks) total += b.num_elems;
    // Part p ends at the first block whose end passes (p + 1) / parts of
    // the server's values; each part takes a block at least while any is
    // left.
    size_t begin = 0;
    int64_t done = 0;
    for (int p = 0; p < parts; ++p) {
      const int64_t target = total * (p + 1) / parts;
      size_t end = begin;
      while (end < blocks.size() &&
             (end == begin || done + blocks[end].num_elems <= target ||
              p == parts - 1)) {
        done += blocks[end].num_elems;
        ++end;
      }
      parts_[static_cast<size_t>(p)][s] = {begin, end};
      begin = end;
    }
  }
}

void ParameterClient::PushPartsAsync(
    int64_t clock, const std::vector<std::vector<float>>* grads, Done done) {
  if (absl::Status checked = CheckAndEncode(*grads); !checked.ok()) {
    std::move(done)(std::move(checked));
    return;
  }
  auto state = std::make_shared<PartsInFlight>(static_cast<int>(parts_.size()),
                                               std::move(done));
  std::vector<int> first;
  for (int taken; state->TakeFirst(kPartsInFlight, &taken);) {
    first.push_back(taken);
  }
  for (int taken : first) PushPart(state, clock, grads, taken);
}

void ParameterClient::PushPart(std::shared_ptr<PartsInFlight> state,
                               int64_t clock,
                               const std::vector<std::vector<float>>* grads,
                               int taken) {
  // The last part (the last layer's blocks) first.
  const Part* part = &parts_[parts_.size() - 1 - static_cast<size_t>(taken)];
  PushWithRows(
      clock, grads, nullptr,
      [this, state, clock, grads](absl::Status status) {
        bool deliver = false;
        int next = 0;
        if (state->Ended(std::move(status), &deliver, &next)) {
          PushPart(state, clock, grads, next);
        }
        if (deliver) state->Deliver();
      },
      part);
}

void ParameterClient::PullPartsAsync(int64_t clock,
                                     std::vector<std::vector<float>>* params,
                                     Done done) {
  params->resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    (*params)[t].resize(tensors_[t].num_elems());
  }
  const int parts = static_cast<int>(parts_.size());
  auto state = std::make_shared<PartsInFlight>(parts, std::move(done));
  std::vector<int> all;
  for (int taken; state->TakeFirst(parts, &taken);) all.push_back(taken);
  // The first part (the first layer's blocks) first.
  for (int p : all) {
    PullFromServers(
        clock, params, /*final=*/false,
        [state](absl::Status status) {
          bool deliver = false;
          int unused = 0;
          state->Ended(std::move(status), &deliver, &unused);
          if (deliver) state->Deliver();
        },
        nullptr, &parts_[static_cast<size_t>(p)]);
  }
}

}  // namespace ps

// The requests a job holds back: pulls waiting on the consistency bound (or
// on the seed), pushes waiting until their update is durable, and Seeds
// waiting until the seed is durable. Callbacks are never run here: they are
// collected into a ReadyCallbacks that the owner runs once its lock is
// released.
#ifndef PS_SERVER_WAITING_REQUESTS_H_
#define PS_SERVER_WAITING_REQUESTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/parameter_wire.h"
#include "ps/v1/parameter.pb.h"
#include "server/parameter_table.h"

namespace ps {

// Receives the reply of a Pull as the serialized PullResponse, or why it
// failed; called exactly once.
using PullWireCallback = std::function<void(absl::StatusOr<WireMessage>)>;
// Receives the reply of a Push, or why it failed; called exactly once.
using PushCallback = std::function<void(absl::StatusOr<v1::PushResponse>)>;
// Receives the reply of a Seed, or why it failed; called exactly once.
using SeedCallback = std::function<void(absl::StatusOr<v1::SeedResponse>)>;

// Callbacks made ready under a job's lock, run after it is released.
struct ReadyCallbacks {
  std::vector<std::pair<PullWireCallback, absl::StatusOr<WireMessage>>> pulls;
  std::vector<std::pair<PushCallback, absl::StatusOr<v1::PushResponse>>> pushes;
  std::vector<std::pair<SeedCallback, absl::StatusOr<v1::SeedResponse>>> seeds;
  // Work to do once the lock is released, after the callbacks (a pull's
  // reads of cold rows, which then answers it: server/server_job_cold.cc).
  std::vector<absl::AnyInvocable<void() &&>> later;
  // Runs every callback, pulls first, then `later`; call with no lock held.
  void Run();
};

// A pull held until it may be answered.
struct WaitingPull {
  int worker = 0;
  int64_t clock = 0;
  bool final = false;  // PullRequest.final: waits for min_clock >= clock.
  PullKeys keys{};
  PullWireCallback done{};
  ReplyAllocator allocate{};
  absl::Time since{};
};

// A push held until its update (and clock) is durable.
struct ParkedPush {
  int worker = 0;
  int64_t clock = 0;
  bool duplicate = false;  // A retry: answered duplicate=true.
  PushCallback done{};
  absl::Time since{};
  // The pipelined step (server/block_clock.h): the table positions of the
  // blocks this push carried; it may also be answered once they are applied
  // and durable, before its clock is.
  std::vector<size_t> positions{};
};

// Thread-compatible: the owning ServerJob calls it under its lock.
class WaitingRequests {
 public:
  // Most pulls, and most pushes, of one worker that may wait at once; a
  // further one drops the oldest (whose client has most likely given up) with
  // RESOURCE_EXHAUSTED. A live worker has one of each at most.
  static constexpr int kMaxPerWorker = 4;

  // `max_per_worker`: the bound above (a pipelined step's parts wait
  // side by side, so its jobs allow more).
  explicit WaitingRequests(std::string job_id,
                           int max_per_worker = kMaxPerWorker)
      : job_id_(std::move(job_id)), max_per_worker_(max_per_worker) {}

  // Holds `pull`; first, if kMaxPerWorker pulls of its worker wait, fails
  // the oldest into `ready`.
  void ParkPull(WaitingPull pull, ReadyCallbacks* ready);
  // Holds `push`, likewise bounded per worker.
  void ParkPush(ParkedPush push, ReadyCallbacks* ready);
  // Holds a Seed's callback until the seed is durable.
  void ParkSeed(SeedCallback done, bool duplicate);

  // Takes out the pulls `can_read(pull)` lets through, each handed to
  // `answer(pull, ready)`, which moves it into `ready` (answered, or in
  // `later`); observes their wait.
  void ReleasePulls(
      absl::FunctionRef<bool(const WaitingPull&)> can_read,
      absl::FunctionRef<void(WaitingPull&, ReadyCallbacks*)> answer,
      absl::FunctionRef<void(absl::Duration)> observe_wait,
      ReadyCallbacks* ready);
  // Moves the pushes whose clock is below their worker's durable clock, or
  // that `part_durable` says are durable (the pipelined step), into `ready`,
  // acknowledged.
  void ReleasePushes(const std::vector<int64_t>& durable_clocks,
                     absl::FunctionRef<bool(const ParkedPush&)> part_durable,
                     absl::FunctionRef<void(absl::Duration)> observe_wait,
                     ReadyCallbacks* ready);
  // Moves every held Seed into `ready`, acknowledged.
  void ReleaseSeeds(ReadyCallbacks* ready);
  // Moves everything held into `ready`, failed with `reason`.
  void FailAll(const absl::Status& reason, ReadyCallbacks* ready);

 private:
  const std::string job_id_;  // For error messages.
  const int max_per_worker_;
  std::vector<WaitingPull> pulls_;
  std::vector<ParkedPush> pushes_;
  std::vector<std::pair<SeedCallback, bool>> seeds_;  // (done, duplicate)
};

}  // namespace ps

#endif  // PS_SERVER_WAITING_REQUESTS_H_

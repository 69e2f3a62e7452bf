// Keeps a ParameterManager's jobs in step with the coordinator's assignments
// on a thread of its own: opening a job initialises or reloads its shards and
// writes its first snapshot (seconds for a model of hundreds of megabytes),
// which must not hold up the membership thread that delivers the assignments
// (a late heartbeat loses the server its lease).
#ifndef PS_SERVER_ASSIGNMENT_LOADER_H_
#define PS_SERVER_ASSIGNMENT_LOADER_H_

#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ps/v1/cluster.pb.h"
#include "server/parameter_manager.h"

namespace ps {

// Thread-safe.
class AssignmentLoader {
 public:
  // `manager` must outlive the loader. Starts the loading thread.
  explicit AssignmentLoader(ParameterManager* manager);
  // Stop().
  ~AssignmentLoader();

  AssignmentLoader(const AssignmentLoader&) = delete;
  AssignmentLoader& operator=(const AssignmentLoader&) = delete;

  // Hands the coordinator's latest assignments to the loading thread and
  // returns at once. Assignments handed over while a sync runs replace any
  // not yet taken (only the latest matter). Until a job is loaded its
  // requests get NOT_FOUND, which workers retry. Errors of a sync are logged
  // (the job stays unloaded and is retried with the next assignments).
  // Ignored after Stop.
  void Offer(std::vector<v1::Assignment> assignments);

  // Waits until every assignment offered so far is synced (for tests).
  void WaitIdle();

  // Lets the sync in progress finish, drops what is not yet taken and joins
  // the thread. Idempotent.
  void Stop();

 private:
  void Loop();

  ParameterManager* const manager_;
  absl::Mutex mu_;
  std::optional<std::vector<v1::Assignment>> latest_ ABSL_GUARDED_BY(mu_);
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_SERVER_ASSIGNMENT_LOADER_H_

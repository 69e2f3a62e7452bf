#include "server/assignment_loader.h"

#include <utility>

#include "common/logging.h"

namespace ps {

AssignmentLoader::AssignmentLoader(ParameterManager* manager)
    : manager_(manager), thread_([this] { Loop(); }) {}

AssignmentLoader::~AssignmentLoader() { Stop(); }

void AssignmentLoader::Offer(std::vector<v1::Assignment> assignments) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  latest_ = std::move(assignments);
}

void AssignmentLoader::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](AssignmentLoader* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->stopping_ ||
               (!self->latest_.has_value() && !self->syncing_);
      },
      this));
}

void AssignmentLoader::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    latest_.reset();
  }
  if (thread_.joinable()) thread_.join();
}

void AssignmentLoader::Loop() {
  while (true) {
    std::vector<v1::Assignment> assignments;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](AssignmentLoader* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || self->latest_.has_value();
          },
          this));
      if (stopping_) return;
      assignments = *std::move(latest_);
      latest_.reset();
      syncing_ = true;
    }
    for (const absl::Status& error : manager_->SyncAssignments(assignments)) {
      PS_LOG_ERROR(error.message());
    }
    absl::MutexLock lock(&mu_);
    syncing_ = false;
  }
}

}  // namespace ps

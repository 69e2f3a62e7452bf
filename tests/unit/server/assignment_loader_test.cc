// AssignmentLoader: the coordinator's assignments are applied on the loader's
// thread, so the membership thread that offers them never waits for a job to
// open, and only the latest assignments offered during a sync are applied.
#include "server/assignment_loader.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/parameter_manager.h"
#include "server/server_metrics.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

v1::Assignment Tiny(const std::string& job_id) {
  return testing::TinyAssignment(
      job_id, 4, 3, 5, 1, "127.0.0.1:1", [](v1::JobSpec* spec) {
        spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
      });
}

// A MemoryShardStore whose Load of `gated_job` waits until Open() is called,
// so that a job's opening can be held in the middle (as a large model's
// initialisation is, for seconds).
class GatedStore : public ShardStore {
 public:
  explicit GatedStore(std::string gated_job)
      : gated_job_(std::move(gated_job)) {}

  absl::Status Write(const ShardWrite& write) override {
    return store_->Write(write);
  }
  absl::Status AppendLog(const std::string& job_id, int64_t first_sequence,
                         const std::vector<std::string>& records,
                         bool sync) override {
    return store_->AppendLog(job_id, first_sequence, records, sync);
  }
  absl::Status PutJobMeta(const std::string& job_id,
                          const std::string& meta) override {
    return store_->PutJobMeta(job_id, meta);
  }
  absl::StatusOr<StoredJob> Load(const std::string& job_id) override {
    if (job_id == gated_job_) {
      if (!entered_.HasBeenNotified()) entered_.Notify();
      open_.WaitForNotification();
    }
    return store_->Load(job_id);
  }
  absl::StatusOr<std::vector<std::string>> ListJobs() override {
    return store_->ListJobs();
  }
  absl::Status DeleteJob(const std::string& job_id) override {
    return store_->DeleteJob(job_id);
  }

  // Waits until the gated job's Load has begun.
  void WaitEntered() { entered_.WaitForNotification(); }
  // Lets the gated Load go on.
  void Open() { open_.Notify(); }

 private:
  const std::string gated_job_;
  const std::unique_ptr<ShardStore> store_ = MemoryShardStore::Create();
  absl::Notification entered_;
  absl::Notification open_;
};

// The status of a pull of every block of `job_id` at clock 0.
absl::Status PullStatus(ParameterManager& manager, const std::string& job_id) {
  v1::PullRequest request;
  request.set_job_id(job_id);
  request.set_map_version(1);
  absl::Status status = absl::UnknownError("no reply");
  manager.Pull(request, [&](absl::StatusOr<v1::PullResponse> reply) {
    status = reply.status();
  });
  return status;
}

class AssignmentLoaderTest : public ::testing::Test {
 protected:
  GatedStore store_{"job-a"};
  prometheus::Registry registry_;
  ServerMetrics metrics_{registry_};
  ParameterManager manager_{&store_, &metrics_};
};

TEST_F(AssignmentLoaderTest, OffersReturnWhileAJobIsStillOpening) {
  AssignmentLoader loader(&manager_);
  loader.Offer({Tiny("job-a")});
  store_.WaitEntered();  // job-a's opening is held in the middle.
  // Offering again (as the next heartbeat does) does not wait for it, and the
  // job is not served until it is open: its workers retry NOT_FOUND.
  loader.Offer({Tiny("job-a"), Tiny("job-b")});
  EXPECT_TRUE(absl::IsNotFound(PullStatus(manager_, "job-a")));
  store_.Open();
  loader.WaitIdle();
  EXPECT_TRUE(PullStatus(manager_, "job-a").ok());
  EXPECT_TRUE(PullStatus(manager_, "job-b").ok());
}

TEST_F(AssignmentLoaderTest, OnlyTheLatestOfferedDuringASyncIsApplied) {
  AssignmentLoader loader(&manager_);
  loader.Offer({Tiny("job-a")});
  store_.WaitEntered();
  loader.Offer({Tiny("job-b")});  // Replaced before the loader takes it.
  loader.Offer({Tiny("job-c")});
  store_.Open();
  loader.WaitIdle();
  EXPECT_TRUE(absl::IsNotFound(PullStatus(manager_, "job-a")));  // Unloaded.
  EXPECT_TRUE(absl::IsNotFound(PullStatus(manager_, "job-b")));
  EXPECT_TRUE(PullStatus(manager_, "job-c").ok());
  // job-b was never opened, so nothing of it was ever stored.
  auto stored = manager_.StoredJobs();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_THAT(*stored, ElementsAre("job-a", "job-c"));
}

TEST_F(AssignmentLoaderTest,
       StopFinishesTheSyncInProgressAndIgnoresLaterOffers) {
  AssignmentLoader loader(&manager_);
  loader.Offer({Tiny("job-a")});
  store_.WaitEntered();
  store_.Open();
  loader.Stop();  // Joins the loader once job-a's sync is done.
  EXPECT_TRUE(PullStatus(manager_, "job-a").ok());
  loader.Stop();  // Idempotent.
  loader.Offer({Tiny("job-c")});
  loader.WaitIdle();
  EXPECT_TRUE(absl::IsNotFound(PullStatus(manager_, "job-c")));
}

}  // namespace
}  // namespace ps

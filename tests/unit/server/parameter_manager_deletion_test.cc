// ParameterManager's side of deleting ended jobs: which stored jobs it reports
// with a heartbeat, and that it deletes those the coordinator says ended,
// never one it serves.
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
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
using ::testing::IsEmpty;

v1::Assignment Tiny(const std::string& job_id) {
  return testing::TinyAssignment(
      job_id, 4, 3, 5, 1, "127.0.0.1:1", [](v1::JobSpec* spec) {
        spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
      });
}

// Stored job ids, polled until they equal `want` or 10 s pass.
std::vector<std::string> WaitForStored(ShardStore* store,
                                       const std::vector<std::string>& want) {
  std::vector<std::string> stored;
  for (int i = 0; i < 200; ++i) {
    stored = store->ListJobs().value_or(std::vector<std::string>{"?"});
    if (stored == want) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return stored;
}

TEST(ParameterManagerDeletionTest, DeletesEndedJobsItNoLongerServes) {
  auto store = MemoryShardStore::Create();
  prometheus::Registry registry;
  ServerMetrics metrics(registry);
  ParameterManager manager(store.get(), &metrics);

  // Two jobs served; opening them stores their initial state.
  ASSERT_THAT(manager.SyncAssignments({Tiny("job-a"), Tiny("job-b")}),
              IsEmpty());
  auto stored = manager.StoredJobs();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(*stored, ElementsAre("job-a", "job-b"));

  // job-a ends: it is unloaded but stays stored until the coordinator says it
  // ended.
  ASSERT_THAT(manager.SyncAssignments({Tiny("job-b")}), IsEmpty());
  stored = manager.StoredJobs();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(*stored, ElementsAre("job-a", "job-b"));

  // A served job is never deleted, even if named.
  manager.DeleteEndedJobs({"job-a", "job-b"});
  EXPECT_THAT(WaitForStored(store.get(), {"job-b"}), ElementsAre("job-b"));
  stored = manager.StoredJobs();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(*stored, ElementsAre("job-b"));
  manager.Shutdown();
}

}  // namespace
}  // namespace ps

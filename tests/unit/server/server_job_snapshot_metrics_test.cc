// The periodic snapshots' metrics: ps_snapshots_total, their bytes and the
// time each held the job's lock (docs/operations.md). Run against both
// shard stores.
#include <cstdint>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "prometheus/histogram.h"
#include "server/server_job.h"
#include "tests/unit/server/server_job_fixture.h"

namespace ps::server_job_test {
namespace {

uint64_t LockSamples(prometheus::Histogram& histogram) {
  return histogram.Collect().histogram.sample_count;
}

TEST_P(ServerJobTest, EverySnapshotIsCountedWithItsBytesAndLockTime) {
  auto job = Open({}, {.snapshot_log_bytes = 1});  // One after each record.
  ASSERT_NE(job, nullptr);
  const double first_bytes = metrics_.snapshot_written_bytes.Value();
  // Opening stores the first snapshot: counted from here.
  const double first = metrics_.snapshots.Value();
  const uint64_t first_locks = LockSamples(metrics_.snapshot_lock_seconds);
  for (int clock = 0; clock < 3; ++clock) {
    ExpectPushOk(*job, MakePush(0, clock, Gradients(clock)));
  }
  ASSERT_TRUE(job->Flush().ok());
  EXPECT_EQ(metrics_.snapshots.Value() - first, 3);
  EXPECT_EQ(LockSamples(metrics_.snapshot_lock_seconds) - first_locks, 3u);
  // Three snapshots of the same blocks: the same bytes each, and the store
  // got the log's records besides.
  const double bytes = metrics_.snapshot_written_bytes.Value() - first_bytes;
  EXPECT_GT(bytes, 0);
  EXPECT_EQ(static_cast<int64_t>(bytes) % 3, 0);
  EXPECT_LT(metrics_.snapshot_written_bytes.Value(),
            metrics_.store_written_bytes.Value());
  // Nothing logged since the last one: closing takes none.
  job->Close(absl::CancelledError("test over"));
  EXPECT_EQ(metrics_.snapshots.Value() - first, 3);
}

TEST_P(ServerJobTest, AClosingSnapshotIsCountedToo) {
  auto job = Open({}, {.snapshot_log_bytes = int64_t{1} << 40});
  ASSERT_NE(job, nullptr);
  const double first = metrics_.snapshots.Value();
  const uint64_t first_locks = LockSamples(metrics_.snapshot_lock_seconds);
  ExpectPushOk(*job, MakePush(0, 0, Gradients(0)));
  ExpectPushOk(*job, MakePush(0, 1, Gradients(1)));
  ASSERT_TRUE(job->Flush().ok());
  EXPECT_EQ(metrics_.snapshots.Value() - first, 0);
  EXPECT_EQ(LockSamples(metrics_.snapshot_lock_seconds) - first_locks, 0u);
  job->Close(absl::CancelledError("test over"));
  EXPECT_EQ(metrics_.snapshots.Value() - first, 1);
  EXPECT_EQ(LockSamples(metrics_.snapshot_lock_seconds) - first_locks, 1u);
}

}  // namespace
}  // namespace ps::server_job_test

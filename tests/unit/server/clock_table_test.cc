// The consistency rules over per-worker clocks (docs/consistency.md): SSP, BSP
// and ASP.
#include "server/clock_table.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/clock_table_push.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ClockTableTest, StartsAtZero) {
  ClockTable table(3, 1, false);
  EXPECT_EQ(table.num_workers(), 3);
  EXPECT_EQ(table.min_clock(), 0);
  EXPECT_THAT(table.clocks(), ElementsAre(0, 0, 0));
  EXPECT_FALSE(table.bulk_synchronous());
  EXPECT_TRUE(table.CanRead(0));
}

TEST(ClockTableTest, SspReadAtClockNeedsMinClockWithinTheBound) {
  for (int64_t s : {0, 1, 2, 5}) {
    SCOPED_TRACE(testing::Message() << "staleness " << s);
    ClockTable table(2, s, false);
    // Worker 0 runs ahead to clock s + 2; worker 1 stays at 0.
    for (int64_t c = 0; c < s + 2; ++c) EXPECT_TRUE(Push(table, 0, c));
    EXPECT_THAT(table.clocks(), ElementsAre(s + 2, 0));
    EXPECT_EQ(table.min_clock(), 0);
    // Worker 0 may ask for any clock it reached; the bound decides when.
    for (int64_t c = 0; c <= s + 2; ++c) {
      EXPECT_TRUE(table.CheckPull(0, c).ok()) << c;
      EXPECT_EQ(table.CanRead(c), c <= s) << "clock " << c;
    }
    // Worker 1 pushes clock 0: min_clock 1 lets clock s + 1 through.
    EXPECT_TRUE(Push(table, 1, 0));
    EXPECT_EQ(table.min_clock(), 1);
    EXPECT_TRUE(table.CanRead(s + 1));
    EXPECT_FALSE(table.CanRead(s + 2));
    EXPECT_TRUE(Push(table, 1, 1));
    EXPECT_EQ(table.min_clock(), 2);
    EXPECT_TRUE(table.CanRead(s + 2));
    EXPECT_FALSE(table.CanRead(s + 3));
  }
}

TEST(ClockTableTest, SspPushesAdvanceTheWorkersClock) {
  ClockTable table(3, 1, false);
  EXPECT_TRUE(Push(table, 1, 0));
  EXPECT_TRUE(Push(table, 1, 1));
  EXPECT_TRUE(Push(table, 2, 0));
  EXPECT_THAT(table.clocks(), ElementsAre(0, 2, 1));
  EXPECT_EQ(table.min_clock(), 0);
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_THAT(table.clocks(), ElementsAre(1, 2, 1));
  EXPECT_EQ(table.min_clock(), 1);
}

TEST(ClockTableTest, SspPushOfAnEarlierClockIsADuplicate) {
  ClockTable table(2, 1, false);
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_TRUE(Push(table, 0, 1));
  for (int64_t c : {0, 1}) {
    auto d = table.CheckPush(0, c);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, PushDisposition::kDuplicate) << c;
  }
  // The next clock is still applied.
  auto next = table.CheckPush(0, 2);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, PushDisposition::kApply);
  EXPECT_THAT(table.clocks(), ElementsAre(2, 0));
}

TEST(ClockTableTest, PushWithAGapIsFailedPrecondition) {
  ClockTable table(2, 1, false);
  auto d = table.CheckPush(0, 1);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("clock"));
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_EQ(table.CheckPush(0, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(table.clocks(), ElementsAre(1, 0));
}

TEST(ClockTableTest, BadWorkerOrClockIsInvalidArgument) {
  ClockTable table(2, 1, false);
  for (int worker : {-1, 2, 100}) {
    auto d = table.CheckPush(worker, 0);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << worker;
    EXPECT_THAT(std::string(d.status().message()), HasSubstr("worker_index"));
    EXPECT_EQ(table.CheckPull(worker, 0).code(),
              absl::StatusCode::kInvalidArgument)
        << worker;
  }
  EXPECT_EQ(table.CheckPush(0, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.CheckPull(0, -1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClockTableTest, SspPullMoreThanTwoClocksBeyondOwnPushesIsRefused) {
  ClockTable table(2, 10, false);
  // Clocks 1 and 2 are allowed before the push of clock 0 is recorded: a
  // worker computing clock 1 pulls for clock 2 while its push of clock 0 may
  // still be in flight.
  EXPECT_TRUE(table.CheckPull(0, 0).ok());
  EXPECT_TRUE(table.CheckPull(0, 2).ok());
  EXPECT_EQ(table.CheckPull(0, 3).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_TRUE(table.CheckPull(0, 3).ok());
  EXPECT_EQ(table.CheckPull(0, 4).code(),
            absl::StatusCode::kFailedPrecondition);
  // Worker 1 has pushed nothing: another worker's pushes do not count.
  EXPECT_EQ(table.CheckPull(1, 3).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ClockTableTest, BspCompletesAClockOnTheLastWorkersPush) {
  ClockTable table(3, 0, true);
  EXPECT_TRUE(table.bulk_synchronous());
  EXPECT_FALSE(Push(table, 1, 0));
  EXPECT_FALSE(Push(table, 0, 0));
  EXPECT_THAT(table.clocks(), ElementsAre(0, 0, 0));
  EXPECT_EQ(table.min_clock(), 0);
  EXPECT_TRUE(Push(table, 2, 0));
  EXPECT_THAT(table.clocks(), ElementsAre(1, 1, 1));
  EXPECT_EQ(table.min_clock(), 1);
  // The next clock starts afresh.
  EXPECT_FALSE(Push(table, 2, 1));
  EXPECT_FALSE(Push(table, 0, 1));
  EXPECT_TRUE(Push(table, 1, 1));
  EXPECT_EQ(table.min_clock(), 2);
}

TEST(ClockTableTest, BspSecondPushOfTheSameClockIsADuplicate) {
  ClockTable table(2, 0, true);
  EXPECT_FALSE(Push(table, 0, 0));
  auto again = table.CheckPush(0, 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, PushDisposition::kDuplicate);
  // Worker 0 cannot push clock 1 before clock 0 completes.
  EXPECT_EQ(table.CheckPush(0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Worker 1's push of clock 0 is new.
  auto other = table.CheckPush(1, 0);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, PushDisposition::kApply);
  EXPECT_TRUE(table.RecordPush(1, 0));
  // After completion, clock 0 is a duplicate for both.
  EXPECT_EQ(*table.CheckPush(0, 0), PushDisposition::kDuplicate);
  EXPECT_EQ(*table.CheckPush(1, 0), PushDisposition::kDuplicate);
}

TEST(ClockTableTest, BspWorkerThatPushedMayPullTheNextClockButWaits) {
  ClockTable table(2, 0, true);
  // Clock 2 with the push of clock 0 in flight; clock 3 is too far.
  EXPECT_TRUE(table.CheckPull(0, 2).ok());
  EXPECT_EQ(table.CheckPull(0, 3).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Push(table, 0, 0));
  // Worker 0 has pushed clock 0: it may ask for clock 3 ...
  EXPECT_TRUE(table.CheckPull(0, 3).ok());
  EXPECT_EQ(table.CheckPull(0, 4).code(),
            absl::StatusCode::kFailedPrecondition);
  // ... but worker 1 may not, and nobody can read clock 1 yet.
  EXPECT_EQ(table.CheckPull(1, 3).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table.CanRead(0));
  EXPECT_FALSE(table.CanRead(1));
  EXPECT_TRUE(Push(table, 1, 0));
  EXPECT_TRUE(table.CanRead(1));
  EXPECT_FALSE(table.CanRead(2));
  EXPECT_TRUE(table.CheckPull(1, 3).ok());
}

TEST(ClockTableTest, BspIgnoresAStalenessBound) {
  ClockTable table(2, 5, true);
  EXPECT_FALSE(table.CanRead(1));
}

TEST(ClockTableTest, AspNeverWaits) {
  ClockTable table(2, kAsyncStaleness, false);
  for (int64_t c = 0; c < 100; ++c) EXPECT_TRUE(Push(table, 0, c));
  EXPECT_EQ(table.min_clock(), 0);
  EXPECT_TRUE(table.CheckPull(0, 100).ok());
  EXPECT_TRUE(table.CanRead(100));
  EXPECT_TRUE(table.CanRead(int64_t{1} << 39));
  // The rules about a worker's own pushes still hold.
  EXPECT_EQ(table.CheckPull(0, 103).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*table.CheckPush(0, 5), PushDisposition::kDuplicate);
}

TEST(ClockTableTest, RestoreSetsClocks) {
  ClockTable table(3, 1, false);
  table.Restore({4, 2, 7});
  EXPECT_THAT(table.clocks(), ElementsAre(4, 2, 7));
  EXPECT_EQ(table.min_clock(), 2);
  EXPECT_EQ(*table.CheckPush(0, 3), PushDisposition::kDuplicate);
  EXPECT_EQ(*table.CheckPush(0, 4), PushDisposition::kApply);
  EXPECT_EQ(table.CheckPush(0, 5).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table.CanRead(3));
  EXPECT_FALSE(table.CanRead(4));
}

TEST(ClockTableTest, RestoreWithFewerOrMoreClocks) {
  ClockTable fewer(3, 0, false);
  fewer.Restore({5});
  EXPECT_THAT(fewer.clocks(), ElementsAre(5, 0, 0));
  EXPECT_EQ(fewer.min_clock(), 0);
  ClockTable more(2, 0, false);
  more.Restore({3, 4, 9});
  EXPECT_THAT(more.clocks(), ElementsAre(3, 4));
  EXPECT_EQ(more.min_clock(), 3);
}

TEST(ClockTableTest, BspRestoreForgetsAnIncompleteClock) {
  ClockTable table(2, 0, true);
  EXPECT_FALSE(Push(table, 0, 0));
  table.Restore({3, 3});
  EXPECT_THAT(table.clocks(), ElementsAre(3, 3));
  EXPECT_EQ(table.min_clock(), 3);
  // Both workers push clock 3 afresh; the clock completes on the second.
  EXPECT_FALSE(Push(table, 0, 3));
  EXPECT_TRUE(Push(table, 1, 3));
  EXPECT_EQ(table.min_clock(), 4);
}

}  // namespace
}  // namespace ps

// Server moves in the clock table (docs/consistency.md, "Server moves"):
// FreezeForMove stops pushes at the first clock no push was accepted for,
// SetMoveBoundary raises the frontier to the clock every server agreed on,
// AllAt says when the state is the boundary's, EndMove takes pushes again.
#include <cstdint>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/clock_table.h"
#include "tests/unit/server/clock_table_push.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

void ExpectRefused(const ClockTable& table, int worker, int64_t clock) {
  auto disposition = table.CheckPush(worker, clock);
  EXPECT_TRUE(absl::IsUnavailable(disposition.status()))
      << "worker " << worker << " clock " << clock << ": "
      << disposition.status();
}

TEST(ClockTableMoveTest, FreezesAtTheFirstClockNoPushWasAcceptedFor) {
  ClockTable table(2, 0, /*bulk_synchronous=*/true);
  ASSERT_FALSE(Push(table, 0, 0));
  ASSERT_TRUE(Push(table, 1, 0));   // Clock 0 complete: both at 1.
  ASSERT_FALSE(Push(table, 0, 1));  // Worker 0's clock-1 push is in the sum.
  EXPECT_EQ(table.move_version(), 0);
  // Worker 0's push of clock 1 was accepted: the frontier is 2.
  EXPECT_EQ(table.FreezeForMove(7), 2);
  EXPECT_EQ(table.move_version(), 7);
  EXPECT_EQ(table.move_frontier(), 2);
  // Below the frontier pushes are still taken (worker 1 completes clock 1);
  // at or beyond it they are refused, to be retried.
  EXPECT_TRUE(Push(table, 1, 1));
  ExpectRefused(table, 0, 2);
  ExpectRefused(table, 1, 2);
  auto refused = table.CheckPush(0, 2);
  EXPECT_THAT(refused.status().message(), HasSubstr("7"));
  // Once per version: a later call returns the same frontier.
  EXPECT_EQ(table.FreezeForMove(7), 2);
}

TEST(ClockTableMoveTest, TheBoundaryRaisesTheFrontierNeverLowersIt) {
  ClockTable table(2, 0, /*bulk_synchronous=*/true);
  EXPECT_EQ(table.FreezeForMove(3), 0);
  ExpectRefused(table, 0, 0);
  // Another server took clock 0 and 1: the boundary is 2.
  table.SetMoveBoundary(3, 2);
  EXPECT_EQ(table.move_frontier(), 2);
  EXPECT_FALSE(Push(table, 0, 0));
  EXPECT_TRUE(Push(table, 1, 0));
  EXPECT_FALSE(Push(table, 1, 1));
  EXPECT_TRUE(Push(table, 0, 1));
  ExpectRefused(table, 0, 2);
  // A smaller boundary does not lower it.
  table.SetMoveBoundary(3, 1);
  EXPECT_EQ(table.move_frontier(), 2);
}

TEST(ClockTableMoveTest, ABoundaryWithoutAFreezeFreezesFirst) {
  // A server that hears of the move with its boundary already set (it missed
  // the first step) freezes and takes the larger of its frontier and C.
  ClockTable table(1, 0, /*bulk_synchronous=*/true);
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_TRUE(Push(table, 0, 1));
  table.SetMoveBoundary(5, 1);
  EXPECT_EQ(table.move_version(), 5);
  EXPECT_EQ(table.move_frontier(), 2);
  ExpectRefused(table, 0, 2);
}

TEST(ClockTableMoveTest, AllAtHoldsOnlyWhenEveryPlaceCompletedTheBoundary) {
  ClockTable table(2, 0, /*bulk_synchronous=*/true);
  table.SetMoveBoundary(1, 2);
  EXPECT_FALSE(table.AllAt(2));
  EXPECT_FALSE(Push(table, 0, 0));
  EXPECT_TRUE(Push(table, 1, 0));
  EXPECT_FALSE(Push(table, 0, 1));
  // Worker 0's clock-1 push is summed but the clock is not complete.
  EXPECT_FALSE(table.AllAt(2));
  EXPECT_TRUE(Push(table, 1, 1));
  EXPECT_TRUE(table.AllAt(2));
  EXPECT_FALSE(table.AllAt(1));
  EXPECT_FALSE(table.AllAt(3));
}

TEST(ClockTableMoveTest, AllAtUnderSsp) {
  ClockTable table(2, 2, /*bulk_synchronous=*/false);
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_TRUE(Push(table, 0, 1));
  EXPECT_EQ(table.FreezeForMove(1), 2);
  EXPECT_FALSE(table.AllAt(2));  // Worker 1 is behind.
  EXPECT_TRUE(Push(table, 1, 0));
  EXPECT_TRUE(Push(table, 1, 1));
  EXPECT_TRUE(table.AllAt(2));
  ExpectRefused(table, 1, 2);
}

TEST(ClockTableMoveTest, EndMoveTakesPushesAgainAndAllowsTheNextMove) {
  ClockTable table(1, 0, /*bulk_synchronous=*/true);
  EXPECT_EQ(table.FreezeForMove(2), 0);
  ExpectRefused(table, 0, 0);
  table.EndMove();
  EXPECT_EQ(table.move_version(), 0);
  EXPECT_EQ(table.move_frontier(), 0);
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_TRUE(Push(table, 0, 1));
  // A later move freezes at the new frontier.
  EXPECT_EQ(table.FreezeForMove(3), 2);
  ExpectRefused(table, 0, 2);
}

TEST(ClockTableMoveTest, ARetriedPushBelowTheFrontierIsADuplicate) {
  // Exactly once across the freeze: a retry of an acknowledged push is
  // recognised as such, not refused.
  ClockTable table(1, 0, /*bulk_synchronous=*/true);
  EXPECT_TRUE(Push(table, 0, 0));
  EXPECT_EQ(table.FreezeForMove(1), 1);
  auto retry = table.CheckPush(0, 0);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(*retry, PushDisposition::kDuplicate);
}

}  // namespace
}  // namespace ps

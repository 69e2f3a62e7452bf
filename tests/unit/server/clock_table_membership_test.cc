// Elastic jobs' membership changes in the clock table (docs/consistency.md,
// "Membership changes"): a proposal fences the leaving places and freezes
// the frontier; the commit stops waiting for the places that left and
// starts the joined ones at the change's clock.
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/clock_table.h"
#include "tests/unit/server/clock_table_push.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// A history: version 0 with `initial` places, then one change.
MembershipHistory History(int initial, int64_t clock,
                          const std::vector<int>& places,
                          const std::vector<int>& joined,
                          const std::vector<int>& left) {
  MembershipHistory history;
  v1::MembershipChange* first = history.Add();
  for (int p = 0; p < initial; ++p) first->add_places(p);
  v1::MembershipChange* change = history.Add();
  change->set_version(1);
  change->set_clock(clock);
  for (int p : places) change->add_places(p);
  for (int p : joined) change->add_joined(p);
  for (int p : left) change->add_left(p);
  return history;
}

TEST(ClockTableMembershipTest, BspStopsWaitingForALostPlace) {
  ClockTable table(4, 0, /*bulk_synchronous=*/true);
  for (int w = 0; w < 3; ++w) EXPECT_FALSE(Push(table, w, 0));
  EXPECT_TRUE(Push(table, 3, 0));
  // Clock 1: place 3 is lost before it pushes.
  for (int w = 0; w < 3; ++w) EXPECT_FALSE(Push(table, w, 1));
  EXPECT_EQ(table.min_clock(), 1);
  EXPECT_EQ(table.Freeze(1, {3}), 2);  // Pushes of clock 1 were accepted.
  EXPECT_EQ(table.Freeze(1, {3}), 2);  // Idempotent.
  EXPECT_EQ(table.Recorded(3), 1);
  auto fenced = table.CheckPush(3, 1);
  EXPECT_EQ(fenced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fenced.status().message(), HasSubstr("leaving"));

  // Committed at clock 2: clock 1 completes with the three pushes it has.
  EXPECT_TRUE(table.Commit(History(4, 2, {0, 1, 2}, {}, {3}), 4));
  EXPECT_EQ(table.completed_clock(), 1);
  EXPECT_EQ(table.completed_pushes(), 3);
  EXPECT_EQ(table.min_clock(), 2);
  EXPECT_EQ(table.frozen_version(), 0);
  for (int w = 0; w < 2; ++w) EXPECT_FALSE(Push(table, w, 2));
  EXPECT_TRUE(Push(table, 2, 2));
  EXPECT_EQ(table.completed_pushes(), 3);
  EXPECT_EQ(table.min_clock(), 3);
  auto left = table.CheckPush(3, 3);
  EXPECT_EQ(left.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(left.status().message(), HasSubstr("left the job at clock 2"));

  // Requests planned under version 0 are refused from clock 2 on.
  EXPECT_TRUE(table.CheckVersion(0, 1).ok());
  EXPECT_EQ(table.CheckVersion(0, 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(table.CheckVersion(0, 2).message(),
              HasSubstr("membership_version"));
  EXPECT_TRUE(table.CheckVersion(1, 2).ok());
  EXPECT_EQ(table.CheckVersion(2, 2).code(), absl::StatusCode::kUnavailable);
}

TEST(ClockTableMembershipTest, LostPlacesPushOfTheCurrentClockIsKept) {
  ClockTable table(3, 0, /*bulk_synchronous=*/true);
  // Place 2 pushed clock 0 here, then was lost; place 1 has not pushed yet.
  EXPECT_FALSE(Push(table, 2, 0));
  EXPECT_FALSE(Push(table, 0, 0));
  EXPECT_EQ(table.Freeze(1, {2}), 1);
  EXPECT_EQ(table.Recorded(2), 1);  // Its push is in the clock's sum.
  EXPECT_FALSE(table.Commit(History(3, 1, {0, 1}, {}, {2}), 3));
  EXPECT_TRUE(Push(table, 1, 0));
  EXPECT_EQ(table.completed_pushes(), 3);  // Place 2's push is averaged in.
  EXPECT_EQ(table.min_clock(), 1);
}

TEST(ClockTableMembershipTest, AJoinedPlaceStartsAtTheChangesClock) {
  ClockTable table(2, 0, /*bulk_synchronous=*/true);
  EXPECT_FALSE(Push(table, 0, 0));
  EXPECT_TRUE(Push(table, 1, 0));
  EXPECT_EQ(table.Freeze(1, {}), 1);
  // The frontier holds: no push of clock 1 until the change commits.
  EXPECT_EQ(table.CheckPush(0, 1).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(table.Commit(History(2, 1, {0, 1, 2}, {2}, {}), 3));
  EXPECT_EQ(table.num_workers(), 3);
  EXPECT_EQ(table.clocks()[2], 1);
  EXPECT_EQ(table.CheckPush(2, 0).value_or(PushDisposition::kApply),
            PushDisposition::kDuplicate);  // Before it joined: nothing to do.
  EXPECT_FALSE(Push(table, 0, 1));
  EXPECT_FALSE(Push(table, 2, 1));
  EXPECT_TRUE(Push(table, 1, 1));
  EXPECT_EQ(table.completed_pushes(), 3);
  EXPECT_EQ(table.min_clock(), 2);
}

TEST(ClockTableMembershipTest, SspMinClockIgnoresALeftPlace) {
  ClockTable table(3, 1, /*bulk_synchronous=*/false);
  for (int c = 0; c < 3; ++c) {
    Push(table, 0, c);
    Push(table, 1, c);
  }
  Push(table, 2, 0);
  EXPECT_EQ(table.min_clock(), 1);
  EXPECT_FALSE(table.CanRead(3));
  EXPECT_EQ(table.Freeze(1, {2}), 3);
  EXPECT_FALSE(table.Commit(History(3, 3, {0, 1}, {}, {2}), 3));
  EXPECT_EQ(table.min_clock(), 3);
  EXPECT_TRUE(table.CanRead(4));
}

}  // namespace
}  // namespace ps

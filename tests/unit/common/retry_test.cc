// Retrier (common/retry.h) and the status macros (common/status_macros.h).
#include "common/retry.h"

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// A sleep that records its delays instead of sleeping.
struct RecordingSleep {
  std::vector<absl::Duration> delays;
  bool keep_going = true;
  bool operator()(absl::Duration d) {
    delays.push_back(d);
    return keep_going;
  }
};

bool Always(const absl::Status&) { return true; }

TEST(RetrierTest, RetriesUntilTheAttemptSucceeds) {
  RecordingSleep sleep;
  int attempts = 0;
  Retrier retry({.initial_backoff = absl::Milliseconds(10),
                 .max_backoff = absl::Milliseconds(40)});
  absl::Status s = retry.Run(
      [&] {
        return ++attempts < 4 ? absl::UnavailableError("down")
                              : absl::OkStatus();
      },
      Always, std::ref(sleep));
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(attempts, 4);
  ASSERT_EQ(sleep.delays.size(), 3u);
  // Full jitter under a ceiling that doubles: 10, 20, 40 ms.
  EXPECT_LE(sleep.delays[0], absl::Milliseconds(10));
  EXPECT_LE(sleep.delays[1], absl::Milliseconds(20));
  EXPECT_LE(sleep.delays[2], absl::Milliseconds(40));
}

TEST(RetrierTest, StopsAtAFailureThePredicateRefuses) {
  RecordingSleep sleep;
  int attempts = 0;
  Retrier retry;
  absl::Status s = retry.Run(
      [&] {
        return ++attempts == 1 ? absl::UnavailableError("down")
                               : absl::InvalidArgumentError("bad request");
      },
      [](const absl::Status& s) { return absl::IsUnavailable(s); },
      std::ref(sleep));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(sleep.delays.size(), 1u);
}

TEST(RetrierTest, StopsWhenTheSleepIsInterrupted) {
  RecordingSleep sleep;
  sleep.keep_going = false;  // The caller is stopping.
  int attempts = 0;
  Retrier retry;
  absl::Status s = retry.Run(
      [&] {
        ++attempts;
        return absl::UnavailableError("down");
      },
      Always, std::ref(sleep));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(attempts, 1);
}

TEST(RetrierTest, NoAttemptStartsAfterTheWindow) {
  RecordingSleep sleep;
  int attempts = 0;
  bool asked = false;
  Retrier retry({.window = absl::ZeroDuration()});
  absl::Status s = retry.Run(
      [&] {
        ++attempts;
        absl::SleepFor(absl::Milliseconds(1));  // The window has passed.
        return absl::UnavailableError("down");
      },
      [&](const absl::Status&) {
        asked = true;
        return true;
      },
      std::ref(sleep));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(attempts, 1);
  // The predicate is asked only when another attempt would be in time.
  EXPECT_FALSE(asked);
  EXPECT_TRUE(sleep.delays.empty());
}

TEST(RetrierTest, ProgressStartsTheBackoffAgain) {
  RecordingSleep sleep;
  int attempts = 0;
  Retrier retry({.initial_backoff = absl::Milliseconds(1),
                 .max_backoff = absl::Seconds(100)});
  absl::Status s = retry.Run(
      [&] {
        ++attempts;
        if (attempts == 20) retry.Progress();
        return attempts < 21 ? absl::UnavailableError("down")
                             : absl::OkStatus();
      },
      Always, std::ref(sleep));
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(sleep.delays.size(), 20u);
  // After 19 failures the ceiling is at its max; progress in the 20th
  // attempt brings the next delay back under the initial 1 ms.
  EXPECT_LE(sleep.delays[19], absl::Milliseconds(1));
}

absl::Status FailIf(bool fail) {
  return fail ? absl::NotFoundError("missing") : absl::OkStatus();
}

absl::StatusOr<int> Half(int n) {
  if (n % 2 != 0) return absl::InvalidArgumentError("odd");
  return n / 2;
}

absl::StatusOr<int> Quarter(int n, int* steps) {
  PS_ASSIGN_OR_RETURN(int half, Half(n));
  ++*steps;
  PS_ASSIGN_OR_RETURN(half, Half(half));  // Assigns an existing variable.
  ++*steps;
  return half;
}

absl::Status TwoChecks(bool first, bool second, int* reached) {
  PS_RETURN_IF_ERROR(FailIf(first));
  *reached = 1;
  PS_RETURN_IF_ERROR(FailIf(second));
  *reached = 2;
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheFirstError) {
  int reached = 0;
  EXPECT_TRUE(absl::IsNotFound(TwoChecks(true, false, &reached)));
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(absl::IsNotFound(TwoChecks(false, true, &reached)));
  EXPECT_EQ(reached, 1);
  EXPECT_TRUE(TwoChecks(false, false, &reached).ok());
  EXPECT_EQ(reached, 2);
}

TEST(StatusMacrosTest, AssignOrReturnAssignsOrReturnsTheError) {
  int steps = 0;
  EXPECT_EQ(Quarter(12, &steps).value(), 3);
  EXPECT_EQ(steps, 2);
  steps = 0;
  absl::StatusOr<int> odd_half = Quarter(6, &steps);  // 6 / 2 = 3 is odd.
  EXPECT_TRUE(absl::IsInvalidArgument(odd_half.status()));
  EXPECT_EQ(steps, 1);
  steps = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Quarter(5, &steps).status()));
  EXPECT_EQ(steps, 0);
}

}  // namespace
}  // namespace ps

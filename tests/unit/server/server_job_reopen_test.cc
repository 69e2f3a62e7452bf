// Reopening one job's shards from its store: values and clocks restored,
// BSP pushes acknowledged only once durable, the update log replayed bit for
// bit, and refusals of an assignment, spec or stored state that does not fit.
// Run against both shard stores.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_job.h"
#include "tests/unit/server/server_job_fixture.h"

namespace ps::server_job_test {
namespace {

TEST_P(ServerJobTest, ReopenRestoresValuesAndClocks) {
  const JobOptions options = {
      .model = v1::ConsistencySpec::SSP, .staleness = 2, .num_workers = 2};
  const Values g0 = Gradients(0), g1 = Gradients(1), g2 = Gradients(2);
  Values expected;
  {
    auto job = Open(options);
    ASSERT_NE(job, nullptr);
    ExpectPushOk(*job, MakePush(0, 0, g0));
    ExpectPushOk(*job, MakePush(0, 1, g1));
    ExpectPushOk(*job, MakePush(1, 0, g2));
    expected = Sgd(Sgd(Sgd(InitialValues(), g0), g1), g2);
    ExpectValuesEq(PullNow(*job, 0, 2), expected);
  }
  ReopenStore();
  auto job = Open(options);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->min_clock(), 1);
  ExpectValuesEq(PullNow(*job, 0, 2), expected);
  // Worker 0 reached clock 2 and worker 1 clock 1, as before (each may read
  // two clocks beyond, not three).
  EXPECT_EQ(StartPull(*job, 0, 5)->reply.status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StartPull(*job, 1, 4)->reply.status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Retries of applied pushes are still recognised.
  ExpectPushOk(*job, MakePush(0, 1, g1), /*duplicate=*/true);
  ExpectPushOk(*job, MakePush(1, 0, g2), /*duplicate=*/true);
  ExpectValuesEq(PullNow(*job, 0, 2), expected);
  // And the next clocks apply.
  ExpectPushOk(*job, MakePush(1, 1, g0));
  EXPECT_EQ(job->min_clock(), 2);
  ExpectValuesEq(PullNow(*job, 1, 2), Sgd(expected, g0));
}

TEST_P(ServerJobTest, BspReopenRestoresCompletedClocks) {
  const JobOptions options = {.model = v1::ConsistencySpec::BSP,
                              .num_workers = 2};
  const Values g0 = Gradients(0), g1 = Gradients(1);
  const Values expected = Sgd(InitialValues(), Mean(g0, g1));
  {
    auto job = Open(options);
    ASSERT_NE(job, nullptr);
    auto first = StartPush(*job, MakePush(0, 0, g0));
    ExpectPushOk(*job, MakePush(1, 0, g1));
    EXPECT_EQ(first->calls, 1);
  }
  ReopenStore();
  auto job = Open(options);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->min_clock(), 1);
  ExpectValuesEq(PullNow(*job, 0, 1), expected);
  ExpectPushOk(*job, MakePush(0, 0, g0), /*duplicate=*/true);
  ExpectPushOk(*job, MakePush(1, 0, g1), /*duplicate=*/true);
  ExpectValuesEq(PullNow(*job, 1, 1), expected);
}

// Design §5: "every acknowledged push survives a process crash of the server".
// Under BSP a push that does not complete its clock lives only in memory, so it
// is not acknowledged until its clock is applied and persisted: if the server
// dies first, the worker retries it and nothing acknowledged is lost.
TEST_P(ServerJobTest, BspPushIsAcknowledgedOnlyOnceItsClockIsPersisted) {
  const JobOptions options = {.model = v1::ConsistencySpec::BSP,
                              .num_workers = 2};
  const Values g0 = Gradients(0), g1 = Gradients(1);
  std::shared_ptr<PushResult> lost;
  {
    auto job = Open(options);
    ASSERT_NE(job, nullptr);
    lost = StartPush(*job, MakePush(0, 0, g0));
    EXPECT_EQ(lost->calls, 0);  // Not acknowledged.
  }
  // The server went away: the push failed, so the worker will retry it.
  ASSERT_EQ(lost->calls, 1);
  EXPECT_FALSE(lost->reply.ok());
  ReopenStore();
  auto job = Open(options);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->min_clock(), 0);
  auto retried = StartPush(*job, MakePush(0, 0, g0));
  EXPECT_EQ(retried->calls, 0);
  ExpectPushOk(*job, MakePush(1, 0, g1));
  ASSERT_EQ(retried->calls, 1);
  ASSERT_TRUE(retried->reply.ok()) << retried->reply.status();
  EXPECT_FALSE(retried->reply->duplicate());
  auto pull = StartPull(*job, 0, 1);
  ASSERT_EQ(pull->calls, 1) << "clock 0 did not complete after the reopen";
  ASSERT_TRUE(pull->reply.ok()) << pull->reply.status();
  ExpectValuesEq(ValuesOf(*pull->reply), Sgd(InitialValues(), Mean(g0, g1)));
}

// A job reopened from its store replays the update log after its last
// snapshot through the code the pushes took (ParameterTable::Apply, the only
// place an update changes state): the state is bit for bit the one that was
// served, whatever the snapshot interval, under BSP (averaged updates) and SSP
// (pushes as they came, in 16-bit encodings too, and a push whose NaN was
// dropped), with Adam's state (range-wise) and LAMB's (whole blocks). A clean
// close leaves a snapshot and no log.
TEST_P(ServerJobTest, ReplayingTheLogRestoresTheServedStateBitForBit) {
  constexpr int kClocks = 6;
  for (const bool lamb : {false, true}) {
    for (const bool bsp : {false, true}) {
      for (const int64_t interval :
           {int64_t{1}, int64_t{300}, int64_t{1} << 40}) {
        SCOPED_TRACE(absl::StrCat(lamb ? "LAMB, " : "Adam, ",
                                  bsp ? "BSP" : "SSP", ", snapshot every ",
                                  interval, " log bytes"));
        ExpectReplayGivesTheServedState(kClocks, bsp, lamb, interval);
      }
    }
  }
}

TEST_P(ServerJobTest, MemoryDurabilityWritesNothing) {
  auto job = Open({.durability = v1::MEMORY});
  ASSERT_NE(job, nullptr);
  ExpectPushOk(*job, MakePush(0, 0, Gradients(0)));
  auto jobs = store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty());
  EXPECT_EQ(store_->Load(kJobId).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ServerJobTest, ReopenWithAnotherShardMapIsRefused) {
  { ASSERT_NE(Open({}), nullptr); }
  v1::Assignment other = MakeAssignment({});
  other.mutable_shard_map()->set_version(kMapVersion + 1);
  auto job = ServerJob::Open(other, store_.get(), &metrics_);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(ServerJobTest, OpenRefusesABadAssignment) {
  v1::Assignment bad_spec = MakeAssignment({});
  bad_spec.mutable_spec()->set_epochs(0);
  EXPECT_EQ(ServerJob::Open(bad_spec, store_.get(), &metrics_).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::Assignment unplaced = MakeAssignment({});
  unplaced.mutable_shard_map()->mutable_blocks()->RemoveLast();
  EXPECT_EQ(ServerJob::Open(unplaced, store_.get(), &metrics_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The server reads the spec as the coordinator completed it and applies no
// default of its own: a spec without one is refused naming the field.
TEST_P(ServerJobTest, OpenRefusesASpecWithoutItsDefaults) {
  v1::Assignment incomplete = MakeAssignment({});
  incomplete.mutable_spec()->clear_durability();
  auto job = ServerJob::Open(incomplete, store_.get(), &metrics_);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              ::testing::StartsWith("durability"));
  incomplete = MakeAssignment({});
  incomplete.mutable_spec()->clear_block_elems();
  job = ServerJob::Open(incomplete, store_.get(), &metrics_);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              ::testing::StartsWith("block_elems"));
}

TEST_P(ServerJobTest, ReopenRefusesStoredClocksOutOfRange) {
  const JobOptions options = {.model = v1::ConsistencySpec::SSP,
                              .num_workers = 2};
  { ASSERT_NE(Open(options), nullptr); }
  ASSERT_TRUE(
      store_->Write({.job_id = kJobId, .worker_clocks = {{1, -3}}}).ok());
  auto negative =
      ServerJob::Open(MakeAssignment(options), store_.get(), &metrics_);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("clock -3"));

  ASSERT_TRUE(store_
                  ->Write({.job_id = kJobId,
                           .worker_clocks = {{1, ServerJob::kMaxClock + 1}}})
                  .ok());
  auto huge = ServerJob::Open(MakeAssignment(options), store_.get(), &metrics_);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kDataLoss);
}

TEST_P(ServerJobTest, ReopenRefusesUnequalBspClocks) {
  const JobOptions options = {.model = v1::ConsistencySpec::BSP,
                              .num_workers = 2};
  { ASSERT_NE(Open(options), nullptr); }
  ASSERT_TRUE(
      store_->Write({.job_id = kJobId, .worker_clocks = {{0, 4}, {1, 3}}})
          .ok());
  auto job = ServerJob::Open(MakeAssignment(options), store_.get(), &metrics_);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ps::server_job_test

// BSP and SSP waiting on one job's shards: BSP applies the mean once every
// worker pushed, SSP pulls wait within the staleness bound, final pulls wait
// for every worker, and Close or destruction fails what waits. Run against
// both shard stores.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_job.h"
#include "tests/unit/server/server_job_fixture.h"

namespace ps::server_job_test {
namespace {

TEST_P(ServerJobTest, BspAppliesTheMeanOnceEveryWorkerPushed) {
  auto job = Open({.model = v1::ConsistencySpec::BSP, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  const Values g0 = Gradients(0), g1 = Gradients(1);
  // Accumulated, not applied, so not acknowledged yet.
  auto first = StartPush(*job, MakePush(0, 0, g0));
  EXPECT_EQ(first->calls, 0);
  // Worker 1 still reads the initial values.
  EXPECT_EQ(job->min_clock(), 0);
  EXPECT_EQ(PullNow(*job, 1, 0), InitialValues());
  EXPECT_EQ(metrics_.updates_applied.Value(), 0);
  // Worker 0 asks for clock 1, which needs worker 1's clock 0.
  auto waiting = StartPull(*job, 0, 1);
  EXPECT_EQ(waiting->calls, 0);
  // A retry of worker 0's push neither completes the clock nor counts twice;
  // it is parked too and acknowledged as a duplicate.
  auto retry = StartPush(*job, MakePush(0, 0, g0));
  EXPECT_EQ(retry->calls, 0);
  EXPECT_EQ(waiting->calls, 0);
  ExpectPushOk(*job, MakePush(1, 0, g1));
  ASSERT_EQ(first->calls, 1);
  ASSERT_TRUE(first->reply.ok()) << first->reply.status();
  EXPECT_FALSE(first->reply->duplicate());
  ASSERT_EQ(retry->calls, 1);
  ASSERT_TRUE(retry->reply.ok()) << retry->reply.status();
  EXPECT_TRUE(retry->reply->duplicate());
  ASSERT_EQ(waiting->calls, 1);
  ASSERT_TRUE(waiting->reply.ok()) << waiting->reply.status();
  EXPECT_EQ(waiting->reply->min_clock(), 1);
  EXPECT_THAT(waiting->reply->worker_clocks(), ElementsAre(1, 1));
  const Values expected = Sgd(InitialValues(), Mean(g0, g1));
  ExpectValuesEq(ValuesOf(*waiting->reply), expected);
  EXPECT_EQ(job->min_clock(), 1);
  ExpectValuesEq(PullNow(*job, 1, 1), expected);
  EXPECT_EQ(metrics_.updates_applied.Value(), 3);
}

TEST_P(ServerJobTest, BspRefusedPushDoesNotAccumulate) {
  auto job = Open({.model = v1::ConsistencySpec::BSP, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  Values bad = Gradients(3);
  bad[kW0][0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(PushNow(*job, MakePush(0, 0, bad)).status().code(),
            absl::StatusCode::kInvalidArgument);
  const Values g0 = Gradients(0), g1 = Gradients(1);
  auto first = StartPush(*job, MakePush(0, 0, g0));
  EXPECT_EQ(first->calls, 0);
  ExpectPushOk(*job, MakePush(1, 0, g1));
  EXPECT_EQ(first->calls, 1);
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), Mean(g0, g1)));
}

TEST_P(ServerJobTest, SspPullWaitsForTheSlowestWorkerWithinTheBound) {
  auto job = Open(
      {.model = v1::ConsistencySpec::SSP, .staleness = 1, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  const Values g0 = Gradients(0), g1 = Gradients(1), g2 = Gradients(2);
  ExpectPushOk(*job, MakePush(0, 0, g0));
  // Clock 1 is within the bound of min_clock 0.
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), g0));
  ExpectPushOk(*job, MakePush(0, 1, g1));
  auto waiting = StartPull(*job, 0, 2);
  EXPECT_EQ(waiting->calls, 0);
  ExpectPushOk(*job, MakePush(1, 0, g2));
  ASSERT_EQ(waiting->calls, 1);
  ASSERT_TRUE(waiting->reply.ok()) << waiting->reply.status();
  EXPECT_EQ(waiting->reply->min_clock(), 1);
  // Worker 0 has pushed clocks 0 and 1, worker 1 clock 0.
  EXPECT_THAT(waiting->reply->worker_clocks(), ElementsAre(2, 1));
  ExpectValuesEq(ValuesOf(*waiting->reply),
                 Sgd(Sgd(Sgd(InitialValues(), g0), g1), g2));
}

TEST_P(ServerJobTest, AFinalPullWaitsForEveryWorkerEvenUnderAsp) {
  auto job = Open({.model = v1::ConsistencySpec::ASP, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  const Values g0 = Gradients(0), g1 = Gradients(1), g2 = Gradients(2),
               g3 = Gradients(3);
  ExpectPushOk(*job, MakePush(0, 0, g0));
  ExpectPushOk(*job, MakePush(0, 1, g1));
  // Worker 0 is done (2 clocks); an ASP read never waits...
  EXPECT_EQ(StartPull(*job, 0, 2)->calls, 1);
  // ...but the final read waits until worker 1 has pushed both its clocks.
  auto final_read = StartPull(*job, 0, 2, {}, kMapVersion, /*final=*/true);
  EXPECT_EQ(final_read->calls, 0);
  ExpectPushOk(*job, MakePush(1, 0, g2));
  EXPECT_EQ(final_read->calls, 0);
  ExpectPushOk(*job, MakePush(1, 1, g3));
  ASSERT_EQ(final_read->calls, 1);
  ASSERT_TRUE(final_read->reply.ok()) << final_read->reply.status();
  EXPECT_EQ(final_read->reply->min_clock(), 2);
  EXPECT_THAT(final_read->reply->worker_clocks(), ElementsAre(2, 2));
  ExpectValuesEq(ValuesOf(*final_read->reply),
                 Sgd(Sgd(Sgd(Sgd(InitialValues(), g0), g1), g2), g3));
}

TEST_P(ServerJobTest, CloseFailsWaitingPullsParkedPushesAndLaterRequests) {
  auto job = Open({.model = v1::ConsistencySpec::BSP, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  auto parked = StartPush(*job, MakePush(0, 0, Gradients(0)));
  auto waiting = StartPull(*job, 0, 1);
  ASSERT_EQ(waiting->calls, 0);
  ASSERT_EQ(parked->calls, 0);
  job->Close(absl::CancelledError("job cancelled"));
  ASSERT_EQ(waiting->calls, 1);
  EXPECT_EQ(waiting->reply.status(), absl::CancelledError("job cancelled"));
  ASSERT_EQ(parked->calls, 1);
  EXPECT_EQ(parked->reply.status(), absl::CancelledError("job cancelled"));
  EXPECT_EQ(StartPull(*job, 1, 0)->reply.status(),
            absl::CancelledError("job cancelled"));
  EXPECT_EQ(PushNow(*job, MakePush(1, 0, Gradients(1))).status(),
            absl::CancelledError("job cancelled"));
  // A second Close keeps the first reason.
  job->Close(absl::AbortedError("other"));
  EXPECT_EQ(StartPull(*job, 1, 0)->reply.status(),
            absl::CancelledError("job cancelled"));
  job.reset();
  EXPECT_EQ(waiting->calls, 1);  // Called exactly once.
}

TEST_P(ServerJobTest, DestroyingTheJobFailsWaitingPullsAndParkedPushes) {
  auto job = Open({.model = v1::ConsistencySpec::BSP, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  auto parked = StartPush(*job, MakePush(0, 0, Gradients(0)));
  auto waiting = StartPull(*job, 0, 1);
  ASSERT_EQ(waiting->calls, 0);
  job.reset();
  ASSERT_EQ(waiting->calls, 1);
  EXPECT_EQ(waiting->reply.status().code(), absl::StatusCode::kAborted);
  ASSERT_EQ(parked->calls, 1);
  EXPECT_EQ(parked->reply.status().code(), absl::StatusCode::kAborted);
}

TEST_P(ServerJobTest, WaitingPullsOfOneWorkerAreBoundedAndOthersUnaffected) {
  auto job = Open(
      {.model = v1::ConsistencySpec::SSP, .staleness = 0, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  ExpectPushOk(*job, MakePush(0, 0, Gradients(0)));
  std::vector<std::shared_ptr<PullResult>> waiting;
  waiting.reserve(ServerJob::kMaxWaitingPerWorker + 1);
  for (int i = 0; i < ServerJob::kMaxWaitingPerWorker + 1; ++i) {
    waiting.push_back(StartPull(*job, 0, 1));
  }
  // The oldest made room for the newest.
  ASSERT_EQ(waiting[0]->calls, 1);
  EXPECT_EQ(waiting[0]->reply.status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(waiting[0]->reply.status().message()),
              HasSubstr("worker_index: worker 0"));
  for (size_t i = 1; i < waiting.size(); ++i) EXPECT_EQ(waiting[i]->calls, 0);
  // Worker 1 is served, and its push releases worker 0's pulls.
  PullNow(*job, 1, 0);
  ExpectPushOk(*job, MakePush(1, 0, Gradients(1)));
  for (size_t i = 1; i < waiting.size(); ++i) {
    ASSERT_EQ(waiting[i]->calls, 1);
    EXPECT_TRUE(waiting[i]->reply.ok()) << waiting[i]->reply.status();
  }
}

}  // namespace
}  // namespace ps::server_job_test

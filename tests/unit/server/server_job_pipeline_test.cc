// The pipelined BSP step on one server (ConsistencySpec.pipeline_parts): a
// block is applied and readable for the next clock once every worker pushed
// it, the clock advances with its last block, each (worker, clock, block)
// counts once (a retried part, a part after a crash's replay), a part is
// answered once its blocks are durable, and the result is bit for bit the
// whole-step push's. Every test runs against MemoryShardStore and
// RocksDbShardStore.
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/float_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_job.h"
#include "tests/testing/server_job_calls.h"
#include "tests/testing/server_job_store_fixture.h"
#include "tests/unit/server/server_job_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Values = testing::BlockValues;
using testing::PullResult;
using testing::PushResult;
using testing::StartPush;
using testing::ValuesOf;

using server_job_test::kB0;
using server_job_test::kJobId;
using server_job_test::kW0;
using server_job_test::kW1;
using server_job_test::MakePush;
using server_job_test::StartPull;

// The tiny job of server_job_fixture.h under `model`, Adam on 2 workers, its
// step pushed in `parts` parts.
v1::JobSpec Spec(int parts, v1::ConsistencySpec::Model model) {
  return server_job_test::Spec({.model = model,
                                .num_workers = 2,
                                .adam = true,
                                .pipeline_parts = parts});
}

// Server 0's assignment of Spec(parts, BSP), holding every block.
v1::Assignment MakeAssignment(int parts) {
  return server_job_test::MakeAssignment({.model = v1::ConsistencySpec::BSP,
                                          .num_workers = 2,
                                          .adam = true,
                                          .pipeline_parts = parts});
}

// A gradient for each of `keys`, distinct per `salt`, not exactly
// representable, so that a block summed twice or in another way shows.
Values Gradients(int salt,
                 const std::vector<uint64_t>& keys = {kW0, kW1, kB0}) {
  const std::map<uint64_t, size_t> sizes = {{kW0, 4}, {kW1, 2}, {kB0, 2}};
  Values g;
  for (uint64_t key : keys) {
    for (size_t i = 0; i < sizes.at(key); ++i) {
      g[key].push_back(0.1f * static_cast<float>(salt + 1) /
                       static_cast<float>(i + 3) * (i % 2 ? -1.0f : 1.0f));
    }
  }
  return g;
}

void ExpectAcked(const std::shared_ptr<PushResult>& push, bool duplicate) {
  ASSERT_EQ(push->calls, 1) << "push not answered";
  ASSERT_TRUE(push->reply.ok()) << push->reply.status();
  EXPECT_EQ(push->reply->duplicate(), duplicate);
}

Values Only(const Values& values, const std::vector<uint64_t>& keys) {
  Values out;
  for (uint64_t key : keys) out[key] = values.at(key);
  return out;
}

using testing::StoreKind;

class ServerJobPipelineTest : public testing::ServerJobStoreFixture {
 protected:
  std::unique_ptr<ServerJob> Open(int parts,
                                  const ServerJobOptions& job_options = {}) {
    auto job = ServerJob::Open(MakeAssignment(parts), store_.get(), &metrics_,
                               job_options);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }

  Values PullNow(ServerJob& job, int worker, int64_t clock,
                 std::vector<uint64_t> keys = {}) {
    auto result = StartPull(job, worker, clock, std::move(keys));
    EXPECT_EQ(result->calls, 1) << "pull at clock " << clock << " waited";
    EXPECT_TRUE(result->reply.ok()) << result->reply.status();
    return result->reply.ok() ? ValuesOf(*result->reply) : Values{};
  }

  // The values after `clocks` clocks of whole-step pushes (no pipeline) of
  // Gradients(2 * clock + worker): what the pipelined job must serve.
  Values WholeStep(int clocks) {
    EXPECT_TRUE(store_->DeleteJob(kJobId).ok());
    auto job = Open(/*parts=*/0);
    for (int clock = 0; clock < clocks; ++clock) {
      auto first = StartPush(*job, MakePush(0, clock, Gradients(2 * clock)));
      auto second =
          StartPush(*job, MakePush(1, clock, Gradients(2 * clock + 1)));
      ExpectAcked(first, false);
      ExpectAcked(second, false);
    }
    Values values = PullNow(*job, 0, clocks);
    job.reset();
    EXPECT_TRUE(store_->DeleteJob(kJobId).ok());
    return values;
  }
};

TEST_P(ServerJobPipelineTest, BlocksAreAppliedAndReadAsTheirPushesArrive) {
  const Values expected = WholeStep(1);
  auto job = Open(/*parts=*/2);
  ASSERT_NE(job, nullptr);
  // The last layer first: bias block.
  auto w0_last = StartPush(*job, MakePush(0, 0, Gradients(0, {kB0})));
  EXPECT_EQ(w0_last->calls, 0);
  auto early = StartPull(*job, 0, 1, {kB0});
  auto rest = StartPull(*job, 0, 1, {kW0, kW1});
  auto whole = StartPull(*job, 1, 1);
  EXPECT_EQ(early->calls, 0);
  auto w1_last = StartPush(*job, MakePush(1, 0, Gradients(1, {kB0})));
  // kB0 has both workers' pushes: applied, durable, its parts answered and
  // its read of clock 1 served, while the clock is still 0.
  ExpectAcked(w0_last, false);
  ExpectAcked(w1_last, false);
  ASSERT_EQ(early->calls, 1);
  ASSERT_TRUE(early->reply.ok()) << early->reply.status();
  EXPECT_EQ(ValuesOf(*early->reply), Only(expected, {kB0}));
  EXPECT_EQ(early->reply->min_clock(), 1);
  EXPECT_THAT(early->reply->worker_clocks(), ElementsAre(1, 1));
  EXPECT_EQ(job->min_clock(), 0);
  EXPECT_EQ(rest->calls, 0);
  EXPECT_EQ(whole->calls, 0);
  // The first layer's part completes the clock.
  auto w0_first = StartPush(*job, MakePush(0, 0, Gradients(0, {kW0, kW1})));
  EXPECT_EQ(w0_first->calls, 0);
  auto w1_first = StartPush(*job, MakePush(1, 0, Gradients(1, {kW0, kW1})));
  ExpectAcked(w0_first, false);
  ExpectAcked(w1_first, false);
  EXPECT_EQ(job->min_clock(), 1);
  ASSERT_EQ(rest->calls, 1);
  ASSERT_EQ(whole->calls, 1);
  ASSERT_TRUE(whole->reply.ok()) << whole->reply.status();
  EXPECT_EQ(ValuesOf(*rest->reply), Only(expected, {kW0, kW1}));
  EXPECT_EQ(ValuesOf(*whole->reply), expected);  // Bit for bit.
}

TEST_P(ServerJobPipelineTest, ARetriedOrOverlappingPartCountsEachBlockOnce) {
  const Values expected = WholeStep(1);
  auto job = Open(/*parts=*/2);
  ASSERT_NE(job, nullptr);
  auto part = StartPush(*job, MakePush(0, 0, Gradients(0, {kB0})));
  auto retry = StartPush(*job, MakePush(0, 0, Gradients(0, {kB0})));
  // Overlaps the first part: only kW0 and kW1 are new.
  auto overlap = StartPush(*job, MakePush(0, 0, Gradients(0)));
  EXPECT_EQ(part->calls + retry->calls + overlap->calls, 0);
  // Worker 1 pushes its whole step in one request.
  auto whole = StartPush(*job, MakePush(1, 0, Gradients(1)));
  ExpectAcked(part, false);
  ExpectAcked(retry, true);
  ExpectAcked(overlap, false);
  ExpectAcked(whole, false);
  EXPECT_EQ(job->min_clock(), 1);
  EXPECT_EQ(PullNow(*job, 1, 1), expected);
  // Retries of an applied clock: duplicates, nothing reapplied.
  ExpectAcked(StartPush(*job, MakePush(0, 0, Gradients(0, {kB0}))), true);
  ExpectAcked(StartPush(*job, MakePush(1, 0, Gradients(1))), true);
  EXPECT_EQ(PullNow(*job, 0, 1), expected);
}

// A crash in the middle of a clock: the blocks applied (and acknowledged)
// before it are replayed from the log and count as pushed; the blocks only
// summed are lost with the memory, but none of their parts was answered, so
// the workers push them again. Whatever the snapshot interval (a snapshot is
// put off while a clock is half applied).
TEST_P(ServerJobPipelineTest, APartAfterACrashIsAppliedOnceFromTheReplay) {
  const Values expected = WholeStep(2);
  for (const int64_t interval : {int64_t{1}, int64_t{1} << 40}) {
    SCOPED_TRACE(interval);
    ASSERT_TRUE(store_->DeleteJob(kJobId).ok());
    auto served = Open(/*parts=*/2, {.snapshot_log_bytes = interval});
    ASSERT_NE(served, nullptr);
    StartPush(*served, MakePush(0, 0, Gradients(0)));
    ExpectAcked(StartPush(*served, MakePush(1, 0, Gradients(1))), false);
    auto acked0 = StartPush(*served, MakePush(0, 1, Gradients(2, {kB0})));
    auto acked1 = StartPush(*served, MakePush(1, 1, Gradients(3, {kB0})));
    ExpectAcked(acked0, false);
    ExpectAcked(acked1, false);
    auto lost = StartPush(*served, MakePush(0, 1, Gradients(2, {kW0})));
    EXPECT_EQ(lost->calls, 0);
    const Values bias = PullNow(*served, 1, 2, {kB0});

    // Reopened from the store while the served job is still open: nothing
    // but the snapshot and the log, as after kill -9.
    auto job = Open(/*parts=*/2, {.snapshot_log_bytes = interval});
    ASSERT_NE(job, nullptr);
    EXPECT_EQ(job->min_clock(), 1);
    EXPECT_EQ(PullNow(*job, 0, 2, {kB0}), bias);
    auto waiting = StartPull(*job, 1, 2);
    // The acknowledged part again: a duplicate, answered at once.
    ExpectAcked(StartPush(*job, MakePush(1, 1, Gradients(3, {kB0}))), true);
    // Worker 0 retries what it had no answer for, worker 1 the rest.
    auto retried = StartPush(*job, MakePush(0, 1, Gradients(2, {kW0})));
    auto last0 = StartPush(*job, MakePush(0, 1, Gradients(2, {kW1})));
    EXPECT_EQ(waiting->calls, 0);
    auto last1 = StartPush(*job, MakePush(1, 1, Gradients(3, {kW0, kW1})));
    ExpectAcked(retried, false);
    ExpectAcked(last0, false);
    ExpectAcked(last1, false);
    EXPECT_EQ(job->min_clock(), 2);
    ASSERT_EQ(waiting->calls, 1);
    ASSERT_TRUE(waiting->reply.ok()) << waiting->reply.status();
    EXPECT_EQ(ValuesOf(*waiting->reply), expected);
    job.reset();
    served.reset();
  }
}

TEST_P(ServerJobPipelineTest, OnlyBspJobsWithoutSparseTablesPipeline) {
  v1::JobSpec spec = Spec(4, v1::ConsistencySpec::SSP);
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("pipeline_parts"));
  spec = Spec(kMaxPipelineParts + 1, v1::ConsistencySpec::BSP);
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("pipeline_parts"));
  EXPECT_TRUE(ValidateJobSpec(Spec(4, v1::ConsistencySpec::BSP)).ok());
}

INSTANTIATE_TEST_SUITE_P(Stores, ServerJobPipelineTest,
                         ::testing::Values(StoreKind::kMemory,
                                           StoreKind::kRocksDb),
                         testing::StoreKindName);

}  // namespace
}  // namespace ps

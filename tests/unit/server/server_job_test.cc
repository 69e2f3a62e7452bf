// One job's shards on a server: pulls, pushes applied exactly once, and
// refusals of malformed or non-finite requests that change nothing. Every
// test runs against MemoryShardStore and RocksDbShardStore (the suite of
// server_job_fixture.h is instantiated here, for the server_job_*_test files
// that share it too).
#include "server/server_job.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/server_job_fixture.h"

namespace ps::server_job_test {
namespace {

TEST_P(ServerJobTest, PullReturnsInitialValues) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->job_id(), kJobId);
  EXPECT_EQ(job->min_clock(), 0);
  auto all = StartPull(*job, 0, 0);
  ASSERT_EQ(all->calls, 1);
  ASSERT_TRUE(all->reply.ok()) << all->reply.status();
  EXPECT_EQ(all->reply->min_clock(), 0);
  // Every block, in key order.
  ASSERT_EQ(all->reply->blocks_size(), 3);
  EXPECT_EQ(all->reply->blocks(0).key(), kW0);
  EXPECT_EQ(all->reply->blocks(1).key(), kW1);
  EXPECT_EQ(all->reply->blocks(2).key(), kB0);
  const Values initial = InitialValues();
  EXPECT_EQ(ValuesOf(*all->reply), initial);
  EXPECT_THAT(initial.at(kB0), ElementsAre(0.0f, 0.0f));
  EXPECT_NE(initial.at(kW0), std::vector<float>(4, 0.0f));

  auto some = StartPull(*job, 0, 0, {kB0, kW1});
  ASSERT_TRUE(some->reply.ok()) << some->reply.status();
  ASSERT_EQ(some->reply->blocks_size(), 2);
  EXPECT_EQ(some->reply->blocks(0).key(), kB0);
  EXPECT_EQ(some->reply->blocks(1).key(), kW1);
  EXPECT_EQ(ValuesOf(*some->reply),
            (Values{{kB0, initial.at(kB0)}, {kW1, initial.at(kW1)}}));
}

TEST_P(ServerJobTest, SspPushAppliesSgdAndAdvancesTheClock) {
  auto job = Open({.model = v1::ConsistencySpec::SSP, .staleness = 1});
  ASSERT_NE(job, nullptr);
  const Values g0 = Gradients(0), g1 = Gradients(1);
  ExpectPushOk(*job, MakePush(0, 0, g0));
  EXPECT_EQ(job->min_clock(), 1);
  const Values after_one = Sgd(InitialValues(), g0);
  ExpectValuesEq(PullNow(*job, 0, 1), after_one);
  // A push of only some blocks updates only those.
  ExpectPushOk(*job, MakePush(0, 1, {{kW1, g1.at(kW1)}}));
  EXPECT_EQ(job->min_clock(), 2);
  Values expected = after_one;
  expected[kW1] = Sgd({{kW1, after_one.at(kW1)}}, g1).at(kW1);
  ExpectValuesEq(PullNow(*job, 0, 2), expected);
  EXPECT_EQ(metrics_.updates_applied.Value(), 4);
}

TEST_P(ServerJobTest, DuplicatePushIsAcknowledgedAndNotReapplied) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  const v1::PushRequest push = MakePush(0, 0, Gradients(0));
  ExpectPushOk(*job, push);
  const Values once = Sgd(InitialValues(), Gradients(0));
  ExpectPushOk(*job, push, /*duplicate=*/true);
  // A retry with other contents is recognised by (worker, clock) alone.
  ExpectPushOk(*job, MakePush(0, 0, Gradients(5)), /*duplicate=*/true);
  EXPECT_EQ(job->min_clock(), 1);
  ExpectValuesEq(PullNow(*job, 0, 1), once);
  EXPECT_EQ(metrics_.pushes_duplicate.Value(), 2);
}

TEST_P(ServerJobTest, NonFinitePushIsRefusedAndChangesNothing) {
  // SSP(1): worker 0 may read clock 1 while worker 1 is at clock 0.
  auto job = Open(
      {.model = v1::ConsistencySpec::SSP, .staleness = 1, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    Values g = Gradients(0);
    g[kB0][1] = bad;  // The last block: the earlier ones are valid.
    auto response = PushNow(*job, MakePush(0, 0, g));
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(response.status().message()),
                HasSubstr("NaN or Inf"));
  }
  EXPECT_EQ(metrics_.pushes_rejected.Value(), 3);
  // Values and clocks are unchanged: worker 0 has not reached clock 1, so it
  // may not read at clock 3 (two clocks beyond its pushes are allowed: a
  // push may be in flight while the next step's pull is made).
  EXPECT_EQ(job->min_clock(), 0);
  EXPECT_EQ(PullNow(*job, 0, 0), InitialValues());
  auto ahead = StartPull(*job, 0, 3);
  EXPECT_EQ(ahead->reply.status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A valid push for the same clock is applied (not taken for a duplicate).
  ExpectPushOk(*job, MakePush(0, 0, Gradients(0)));
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), Gradients(0)));
}

TEST_P(ServerJobTest, MalformedPushesAreRefusedAndChangeNothing) {
  auto job = Open({.staleness = 1, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  const Values g = Gradients(0);
  struct Case {
    const char* what;
    v1::PushRequest request;
    absl::StatusCode code;
  };
  std::vector<Case> cases;
  {
    v1::PushRequest r = MakePush(0, 0, g);
    r.mutable_gradients(0)->mutable_data()->pop_back();  // 15 bytes.
    cases.push_back({"ragged bytes", r, absl::StatusCode::kInvalidArgument});
  }
  {
    Values short_g = g;
    short_g[kW0].pop_back();  // 3 floats for a 4-value block.
    cases.push_back({"wrong size", MakePush(0, 0, short_g),
                     absl::StatusCode::kInvalidArgument});
  }
  {
    Values unknown = g;
    unknown[BlockKey(0, 2)] = {1.0f};
    cases.push_back({"unknown key", MakePush(0, 0, unknown),
                     absl::StatusCode::kInvalidArgument});
  }
  {
    v1::PushRequest r = MakePush(0, 0, g);
    *r.add_gradients() = r.gradients(0);
    cases.push_back({"key twice", r, absl::StatusCode::kInvalidArgument});
  }
  {
    // FP16 declared, float32 bytes sent: twice the size the encoding needs.
    v1::PushRequest r = MakePush(0, 0, g);
    r.set_gradient_encoding(v1::FP16);
    cases.push_back(
        {"fp16 with 4-byte values", r, absl::StatusCode::kInvalidArgument});
  }
  {
    v1::PushRequest r = MakeEncodedPush(0, 0, g, v1::BF16);
    r.mutable_gradients(2)->mutable_data()->pop_back();  // 3 bytes.
    cases.push_back(
        {"ragged bf16 bytes", r, absl::StatusCode::kInvalidArgument});
  }
  {
    v1::PushRequest r = MakeEncodedPush(0, 0, g, v1::FP16);
    r.mutable_gradients(1)->mutable_data()->append("\0\0", 2);  // 3 values.
    cases.push_back(
        {"one fp16 value too many", r, absl::StatusCode::kInvalidArgument});
  }
  for (int encoding : {3, -1}) {
    v1::PushRequest r = MakeEncodedPush(0, 0, g, v1::FP16);
    r.set_gradient_encoding(static_cast<v1::Precision>(encoding));
    cases.push_back({"not an encoding", r, absl::StatusCode::kInvalidArgument});
  }
  cases.push_back({"old map", MakePush(0, 0, g, kMapVersion - 1),
                   absl::StatusCode::kFailedPrecondition});
  cases.push_back({"newer map", MakePush(0, 0, g, kMapVersion + 1),
                   absl::StatusCode::kFailedPrecondition});
  cases.push_back(
      {"worker -1", MakePush(-1, 0, g), absl::StatusCode::kInvalidArgument});
  cases.push_back(
      {"worker 2 of 2", MakePush(2, 0, g), absl::StatusCode::kInvalidArgument});
  cases.push_back({"negative clock", MakePush(0, -1, g),
                   absl::StatusCode::kInvalidArgument});
  cases.push_back(
      {"clock gap", MakePush(0, 1, g), absl::StatusCode::kFailedPrecondition});
  for (const Case& c : cases) {
    auto response = PushNow(*job, c.request);
    EXPECT_EQ(response.status().code(), c.code)
        << c.what << ": " << response.status();
  }
  EXPECT_EQ(job->min_clock(), 0);
  EXPECT_EQ(PullNow(*job, 0, 0), InitialValues());
  // Nothing was recorded for worker 0's clock 0: the valid push is applied.
  ExpectPushOk(*job, MakePush(0, 0, g));
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), g));
}

TEST_P(ServerJobTest, MalformedPullsAreRefused) {
  auto job = Open({.num_workers = 2});
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(StartPull(*job, 0, 0, {BlockKey(5, 0)})->reply.status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StartPull(*job, 0, 0, {}, kMapVersion + 1)->reply.status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(StartPull(*job, 0, 0, {}, 0)->reply.status().message()),
      HasSubstr("map_version"));
  EXPECT_EQ(StartPull(*job, 2, 0)->reply.status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StartPull(*job, -1, 0)->reply.status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StartPull(*job, 0, 3)->reply.status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(ServerJobTest, ServerHoldsOnlyItsOwnBlocks) {
  v1::Assignment assignment = MakeAssignment({});
  assignment.mutable_shard_map()->add_servers("localhost:1");
  for (auto& p : *assignment.mutable_shard_map()->mutable_blocks()) {
    if (p.key() == kW1) p.set_server(1);
  }
  auto job = ServerJob::Open(assignment, store_.get(), &metrics_);
  ASSERT_TRUE(job.ok()) << job.status();
  const Values initial = InitialValues();
  EXPECT_EQ(PullNow(**job, 0, 0),
            (Values{{kW0, initial.at(kW0)}, {kB0, initial.at(kB0)}}));
  EXPECT_EQ(StartPull(**job, 0, 0, {kW1})->reply.status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(ServerJobTest, PullRefusesRepeatedKeys) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  auto repeated = StartPull(*job, 0, 0, {kW0, kB0, kW0});
  EXPECT_EQ(repeated->reply.status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(repeated->reply.status().message()),
              HasSubstr("keys: block"));
  auto too_many = StartPull(*job, 0, 0, {kW0, kW1, kB0, kW0});
  EXPECT_EQ(too_many->reply.status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Stores, ServerJobTest,
                         ::testing::Values(StoreKind::kMemory,
                                           StoreKind::kRocksDb),
                         testing::StoreKindName);

}  // namespace
}  // namespace ps::server_job_test

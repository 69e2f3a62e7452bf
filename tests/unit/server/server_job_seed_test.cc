// EXTERNAL models on a server: FROM_WORKER tensors wait for worker 0's Seed
// (pulls wait, pushes are refused), the first Seed is applied exactly once
// and persisted, later ones change nothing, bad ones are refused and change
// nothing. Every test runs against MemoryShardStore and RocksDbShardStore.
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/float_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/parameter_manager.h"
#include "server/rocksdb_shard_store.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "tests/testing/server_job_calls.h"
#include "tests/testing/server_job_store_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Values = testing::BlockValues;
using testing::PullResult;
using testing::ValuesOf;

constexpr char kJobId[] = "job-000001";
constexpr float kLearningRate = 0.5f;

// "w" [2, 3] FROM_WORKER in blocks of at most 4 values (two blocks), "s" [2]
// CONSTANT 1.5 (one block).
const uint64_t kW0 = BlockKey(0, 0);  // 4 values.
const uint64_t kW1 = BlockKey(0, 1);  // 2 values.
const uint64_t kS0 = BlockKey(1, 0);  // 2 values.

v1::Assignment MakeAssignment(v1::Durability durability, bool external = true) {
  v1::Assignment a;
  a.set_job_id(kJobId);
  v1::JobSpec* spec = a.mutable_spec();
  spec->set_name("seed");
  if (external) {
    v1::ModelSpec* model = spec->mutable_model();
    model->set_kind(v1::ModelSpec::EXTERNAL);
    v1::TensorDecl* w = model->add_tensors();
    w->set_name("w");
    w->add_shape(2);
    w->add_shape(3);
    v1::TensorDecl* s = model->add_tensors();
    s->set_name("s");
    s->add_shape(2);
    s->set_init(v1::CONSTANT);
    s->set_value(1.5f);
  } else {
    spec->mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
    spec->mutable_model()->set_input_dim(3);
    spec->mutable_model()->set_num_classes(2);
    auto* d = spec->mutable_dataset();
    d->set_format(v1::DatasetSpec::IDX);
    d->set_train_images("a");
    d->set_train_labels("b");
    d->set_test_images("c");
    d->set_test_labels("d");
  }
  spec->set_epochs(1);
  spec->set_batch_size(1);
  spec->set_seed(3);
  spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(kLearningRate);
  spec->mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
  spec->set_num_workers(1);
  spec->set_num_servers(1);
  spec->set_block_elems(4);
  spec->set_durability(durability);
  ApplyJobSpecDefaults(spec);
  a.set_index(0);
  a.set_num_workers(1);
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(1);
  map->add_servers("localhost:0");
  testing::PlaceEveryBlockOnServer0(&a, 4);
  return a;
}

v1::SeedRequest MakeSeed(const Values& blocks, int worker = 0,
                         int64_t version = 1) {
  v1::SeedRequest request;
  request.set_job_id(kJobId);
  request.set_worker_index(worker);
  request.set_map_version(version);
  for (const auto& [key, v] : blocks) {
    v1::Block* b = request.add_blocks();
    b->set_key(key);
    EncodeFloats(v, b->mutable_data());
  }
  return request;
}

// Calls `start` with a callback and waits for its reply, which may come from
// the job's update-log writer thread.
template <typename T>
absl::StatusOr<T> Await(
    const std::function<void(std::function<void(absl::StatusOr<T>)>)>& start) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<T>>>();
  std::future<absl::StatusOr<T>> future = promise->get_future();
  start([promise](absl::StatusOr<T> reply) {
    promise->set_value(std::move(reply));
  });
  if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return absl::DeadlineExceededError("no reply within 30 s");
  }
  return future.get();
}

template <typename Target>
absl::StatusOr<v1::SeedResponse> SeedNow(Target& target,
                                         const v1::SeedRequest& request) {
  return Await<v1::SeedResponse>(
      [&](auto done) { target.Seed(request, std::move(done)); });
}

// The module's values of "w": 1..6, cut as the blocks are.
Values ModuleValues(float offset = 0) {
  return {{kW0, {1 + offset, 2 + offset, 3 + offset, 4 + offset}},
          {kW1, {5 + offset, 6 + offset}}};
}

std::shared_ptr<PullResult> StartPull(ServerJob& job, int64_t clock) {
  v1::PullRequest request;
  request.set_job_id(kJobId);
  request.set_worker_index(0);
  request.set_clock(clock);
  request.set_map_version(1);
  return testing::SendPull(job, request);
}

v1::PushRequest MakePush(int64_t clock, float g) {
  v1::PushRequest request;
  request.set_job_id(kJobId);
  request.set_worker_index(0);
  request.set_clock(clock);
  request.set_map_version(1);
  for (auto [key, n] : {std::pair{kW0, 4}, {kW1, 2}, {kS0, 2}}) {
    v1::Block* b = request.add_gradients();
    b->set_key(key);
    EncodeFloats(std::vector<float>(n, g), b->mutable_data());
  }
  return request;
}

using testing::StoreKind;

class ServerJobSeedTest : public testing::ServerJobStoreFixture {
 protected:
  std::unique_ptr<ServerJob> Open(bool external = true) {
    auto job = ServerJob::Open(MakeAssignment(v1::WAL, external), store_.get(),
                               &metrics_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }
};

TEST_P(ServerJobSeedTest, PullsWaitForTheSeedThenReadItsValues) {
  auto job = Open();
  ASSERT_NE(job, nullptr);
  EXPECT_FALSE(job->seeded());
  auto waiting = StartPull(*job, 0);
  EXPECT_EQ(waiting->calls, 0) << "a read before the seed must wait";

  auto seeded = SeedNow(*job, MakeSeed(ModuleValues()));
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  EXPECT_FALSE(seeded->duplicate());
  EXPECT_TRUE(job->seeded());
  ASSERT_EQ(waiting->calls, 1);
  ASSERT_TRUE(waiting->reply.ok()) << waiting->reply.status();
  Values expected = ModuleValues();
  expected[kS0] = {1.5f, 1.5f};  // CONSTANT, set by the server.
  EXPECT_EQ(ValuesOf(*waiting->reply), expected);
}

TEST_P(ServerJobSeedTest, ASecondSeedChangesNothing) {
  auto job = Open();
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(SeedNow(*job, MakeSeed(ModuleValues())).ok());
  // A retry, and a replacement worker 0 with other values.
  for (float offset : {0.0f, 10.0f}) {
    auto again = SeedNow(*job, MakeSeed(ModuleValues(offset)));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->duplicate());
  }
  // After training too: the trained values stay.
  auto pushed = Await<v1::PushResponse>(
      [&](auto done) { job->Push(MakePush(0, 1.0f), std::move(done)); });
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  auto late = SeedNow(*job, MakeSeed(ModuleValues(20)));
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->duplicate());
  auto read = StartPull(*job, 1);
  ASSERT_TRUE(read->reply.ok());
  EXPECT_THAT(ValuesOf(*read->reply)[kW1],
              ElementsAre(5 - kLearningRate, 6 - kLearningRate));
}

TEST_P(ServerJobSeedTest, BadSeedsAreRefusedAndChangeNothing) {
  auto job = Open();
  ASSERT_NE(job, nullptr);
  const Values good = ModuleValues();
  Values missing = good;
  missing.erase(kW1);
  Values constant = good;
  constant.erase(kW1);
  constant[kS0] = {1, 2};
  Values unknown = good;
  unknown[BlockKey(7, 0)] = {1};
  Values short_block = good;
  short_block[kW1] = {5};
  Values nan = good;
  nan[kW0][2] = std::numeric_limits<float>::quiet_NaN();
  Values inf = good;
  inf[kW1][0] = std::numeric_limits<float>::infinity();
  v1::SeedRequest repeated = MakeSeed(good);
  *repeated.add_blocks() = repeated.blocks(0);
  repeated.mutable_blocks()->DeleteSubrange(1, 1);  // w1 gone, w0 twice.
  const struct {
    const char* name;
    v1::SeedRequest request;
    absl::StatusCode code;
    const char* message;
  } cases[] = {
      {"worker 1", MakeSeed(good, 1), absl::StatusCode::kInvalidArgument,
       "worker_index: only worker 0"},
      {"stale map", MakeSeed(good, 0, 2), absl::StatusCode::kFailedPrecondition,
       "map_version"},
      {"a block missing", MakeSeed(missing), absl::StatusCode::kInvalidArgument,
       "blocks: 1 blocks, but this server holds 2"},
      {"a CONSTANT block", MakeSeed(constant),
       absl::StatusCode::kInvalidArgument,
       "is not a block of a FROM_WORKER tensor"},
      {"an unknown block", MakeSeed(unknown),
       absl::StatusCode::kInvalidArgument, "blocks: 3 blocks"},
      {"a short block", MakeSeed(short_block),
       absl::StatusCode::kInvalidArgument, "has 4 bytes, expected 8"},
      {"NaN", MakeSeed(nan), absl::StatusCode::kInvalidArgument,
       "contains NaN or Inf"},
      {"Inf", MakeSeed(inf), absl::StatusCode::kInvalidArgument,
       "contains NaN or Inf"},
      {"a repeated block", repeated, absl::StatusCode::kInvalidArgument,
       "appears twice"},
  };
  for (const auto& c : cases) {
    auto reply = SeedNow(*job, c.request);
    EXPECT_EQ(reply.status().code(), c.code)
        << c.name << ": " << reply.status();
    EXPECT_THAT(std::string(reply.status().message()), HasSubstr(c.message))
        << c.name;
    EXPECT_FALSE(job->seeded()) << c.name;
  }
  auto waiting = StartPull(*job, 0);
  EXPECT_EQ(waiting->calls, 0);
  ASSERT_TRUE(SeedNow(*job, MakeSeed(good)).ok());
  ASSERT_EQ(waiting->calls, 1);
  EXPECT_EQ(ValuesOf(*waiting->reply)[kW0], good.at(kW0));
}

TEST_P(ServerJobSeedTest, TheSeedAndItsAbsenceSurviveARestart) {
  {
    auto job = Open();
    ASSERT_NE(job, nullptr);
  }
  ReopenStore();
  {
    // Not seeded before the restart: still waiting after it.
    auto job = Open();
    ASSERT_NE(job, nullptr);
    EXPECT_FALSE(job->seeded());
    ASSERT_TRUE(SeedNow(*job, MakeSeed(ModuleValues())).ok());
  }
  ReopenStore();
  auto job = Open();
  ASSERT_NE(job, nullptr);
  EXPECT_TRUE(job->seeded());
  auto read = StartPull(*job, 0);
  ASSERT_EQ(read->calls, 1);
  ASSERT_TRUE(read->reply.ok()) << read->reply.status();
  EXPECT_EQ(ValuesOf(*read->reply)[kW0], ModuleValues().at(kW0));
  auto again = SeedNow(*job, MakeSeed(ModuleValues(10)));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate());
}

TEST_P(ServerJobSeedTest, ABuiltInModelHasNothingToSeed) {
  auto job = Open(/*external=*/false);
  ASSERT_NE(job, nullptr);
  EXPECT_TRUE(job->seeded());
  EXPECT_EQ(StartPull(*job, 0)->calls, 1);
  auto reply = SeedNow(*job, MakeSeed(ModuleValues()));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kFailedPrecondition)
      << reply.status();
  EXPECT_THAT(std::string(reply.status().message()),
              HasSubstr("no block of a FROM_WORKER tensor"));
}

TEST_P(ServerJobSeedTest, TheManagerRefusesPushesBeforeTheSeed) {
  ParameterManager manager(store_.get(), &metrics_);
  ASSERT_THAT(manager.SyncAssignments({MakeAssignment(v1::WAL)}),
              ::testing::IsEmpty());
  auto push = [&] {
    return Await<v1::PushResponse>(
        [&](auto done) { manager.Push(MakePush(0, 1.0f), std::move(done)); });
  };
  std::optional<absl::StatusOr<v1::PushResponse>> pushed = push();
  EXPECT_EQ(pushed->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(pushed->status().message()),
              HasSubstr("not seeded yet"));
  auto seeded = SeedNow(manager, MakeSeed(ModuleValues()));
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  pushed = push();
  EXPECT_TRUE(pushed->ok()) << pushed->status();
  // An unknown job.
  v1::SeedRequest other = MakeSeed(ModuleValues());
  other.set_job_id("job-000002");
  EXPECT_EQ(SeedNow(manager, other).status().code(),
            absl::StatusCode::kNotFound);
  manager.Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Stores, ServerJobSeedTest,
                         ::testing::Values(StoreKind::kMemory,
                                           StoreKind::kRocksDb),
                         testing::StoreKindName);

}  // namespace
}  // namespace ps

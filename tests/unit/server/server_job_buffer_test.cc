// Module buffers of EXTERNAL models on a server (TensorDecl.buffer;
// docs/python.md, "Module buffers"): a push carries the change a worker made
// to a buffer, which the server adds without the optimizer (under BSP the
// workers' mean change, so that the buffer becomes their average), exactly
// once per (worker, clock), and the same after a restart from the update log.
// Run against MemoryShardStore and RocksDbShardStore. Also the model layout's
// side: buffers are left out of the digest, and a model of buffers only is
// refused.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/float_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_job.h"
#include "tests/testing/server_job_calls.h"
#include "tests/testing/server_job_store_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using Values = std::map<uint64_t, std::vector<float>>;

constexpr char kJobId[] = "job-000001";

// "w" [4] ZEROS, a parameter trained by Adam; "running" [3] a buffer,
// CONSTANT 1 (nothing to seed). One block each.
const uint64_t kW = BlockKey(0, 0);
const uint64_t kRunning = BlockKey(1, 0);

v1::ModelSpec Model() {
  v1::ModelSpec model;
  model.set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* w = model.add_tensors();
  w->set_name("w");
  w->add_shape(4);
  w->set_init(v1::ZEROS);
  v1::TensorDecl* running = model.add_tensors();
  running->set_name("running");
  running->add_shape(3);
  running->set_init(v1::CONSTANT);
  running->set_value(1.0f);
  running->set_buffer(true);
  return model;
}

v1::Assignment MakeAssignment(v1::ConsistencySpec::Model consistency) {
  v1::Assignment a;
  a.set_job_id(kJobId);
  v1::JobSpec* spec = a.mutable_spec();
  spec->set_name("buffers");
  *spec->mutable_model() = Model();
  spec->set_epochs(1);
  spec->set_batch_size(1);
  spec->set_seed(3);
  spec->mutable_optimizer()->mutable_adam()->set_learning_rate(0.1f);
  spec->mutable_consistency()->set_model(consistency);
  spec->set_num_workers(2);
  spec->set_num_servers(1);
  spec->set_block_elems(4);
  spec->set_durability(v1::WAL);
  ApplyJobSpecDefaults(spec);
  a.set_index(0);
  a.set_num_workers(2);
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(1);
  map->add_servers("localhost:0");
  testing::PlaceEveryBlockOnServer0(&a, 4);
  return a;
}

// A push of `worker` at `clock`: gradient 1 for every value of "w", and the
// change `running` to the buffer.
v1::PushRequest MakePush(int worker, int64_t clock,
                         const std::vector<float>& running) {
  v1::PushRequest request;
  request.set_job_id(kJobId);
  request.set_worker_index(worker);
  request.set_clock(clock);
  request.set_map_version(1);
  v1::Block* w = request.add_gradients();
  w->set_key(kW);
  EncodeFloats(std::vector<float>(4, 1.0f), w->mutable_data());
  v1::Block* r = request.add_gradients();
  r->set_key(kRunning);
  EncodeFloats(running, r->mutable_data());
  return request;
}

struct Reply {
  int calls = 0;
  absl::StatusOr<v1::PushResponse> push = absl::UnknownError("not called");
  absl::StatusOr<v1::PullResponse> pull = absl::UnknownError("not called");
};

std::shared_ptr<Reply> StartPush(ServerJob& job,
                                 const v1::PushRequest& request) {
  auto reply = std::make_shared<Reply>();
  job.Push(request, [reply](absl::StatusOr<v1::PushResponse> r) {
    ++reply->calls;
    reply->push = std::move(r);
  });
  EXPECT_TRUE(job.Flush().ok());
  return reply;
}

Values PullNow(ServerJob& job, int64_t clock) {
  v1::PullRequest request;
  request.set_job_id(kJobId);
  request.set_worker_index(0);
  request.set_clock(clock);
  request.set_map_version(1);
  auto reply = std::make_shared<Reply>();
  job.Pull(request, [reply](absl::StatusOr<v1::PullResponse> r) {
    ++reply->calls;
    reply->pull = std::move(r);
  });
  EXPECT_EQ(reply->calls, 1) << "pull of clock " << clock << " waited";
  Values values;
  if (reply->calls != 1 || !reply->pull.ok()) return values;
  for (const v1::Block& b : reply->pull->blocks()) {
    std::vector<float>& v = values[b.key()];
    v.resize(FloatCount(b.data()));
    DecodeFloats(b.data(), v);
  }
  return values;
}

using testing::StoreKind;

class ServerJobBufferTest : public testing::ServerJobStoreFixture {
 protected:
  std::unique_ptr<ServerJob> Open(v1::ConsistencySpec::Model consistency) {
    auto job =
        ServerJob::Open(MakeAssignment(consistency), store_.get(), &metrics_);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }
};

TEST_P(ServerJobBufferTest, BspSetsTheWorkersAverageOnceAndAfterARestart) {
  Values served;
  {
    auto job = Open(v1::ConsistencySpec::BSP);
    ASSERT_NE(job, nullptr);
    EXPECT_THAT(PullNow(*job, 0)[kRunning], ElementsAre(1, 1, 1));
    // Clock 0: worker 0 read 1 and made it {1.5, 0, 3}; worker 1 {2.5, 2, 1}.
    auto first = StartPush(*job, MakePush(0, 0, {0.5f, -1.0f, 2.0f}));
    EXPECT_EQ(first->calls, 0) << "BSP parks the push until the clock applies";
    // A retry of worker 0's push before the clock applied adds nothing.
    auto retry = StartPush(*job, MakePush(0, 0, {0.5f, -1.0f, 2.0f}));
    auto second = StartPush(*job, MakePush(1, 0, {1.5f, 1.0f, 0.0f}));
    ASSERT_EQ(second->calls, 1);
    ASSERT_TRUE(second->push.ok()) << second->push.status();
    Values after0 = PullNow(*job, 1);
    // The average of the workers' buffers: 1 + the mean change.
    EXPECT_THAT(after0[kRunning], ElementsAre(2.0f, 1.0f, 2.0f));
    // The parameter went through Adam (a first step moves by the rate).
    EXPECT_THAT(after0[kW], Not(ElementsAre(0, 0, 0, 0)));
    // A retry after the clock applied: a duplicate, nothing added.
    auto late = StartPush(*job, MakePush(1, 0, {1.5f, 1.0f, 0.0f}));
    ASSERT_EQ(late->calls, 1);
    ASSERT_TRUE(late->push.ok());
    EXPECT_TRUE(late->push->duplicate());
    for (const auto& r : {first, retry}) {
      ASSERT_EQ(r->calls, 1);
      ASSERT_TRUE(r->push.ok()) << r->push.status();
    }
    EXPECT_EQ(PullNow(*job, 1), after0);
    // Clock 1: an integer count (num_batches_tracked) moves by 1 everywhere.
    StartPush(*job, MakePush(0, 1, {1.0f, 1.0f, -0.25f}));
    StartPush(*job, MakePush(1, 1, {1.0f, 1.0f, 0.25f}));
    served = PullNow(*job, 2);
    EXPECT_THAT(served[kRunning], ElementsAre(3.0f, 2.0f, 2.0f));
  }
  ReopenStore();
  auto job = Open(v1::ConsistencySpec::BSP);
  ASSERT_NE(job, nullptr);
  // Replayed through the same rule: the same bits.
  EXPECT_EQ(PullNow(*job, 2), served);
  auto again = StartPush(*job, MakePush(0, 1, {5.0f, 5.0f, 5.0f}));
  ASSERT_EQ(again->calls, 1);
  ASSERT_TRUE(again->push.ok());
  EXPECT_TRUE(again->push->duplicate());
  EXPECT_EQ(PullNow(*job, 2), served);
}

TEST_P(ServerJobBufferTest, AspAddsEachWorkersChangeOnce) {
  Values served;
  {
    auto job = Open(v1::ConsistencySpec::ASP);
    ASSERT_NE(job, nullptr);
    StartPush(*job, MakePush(0, 0, {1.0f, 0.5f, -1.0f}));
    EXPECT_THAT(PullNow(*job, 1)[kRunning], ElementsAre(2.0f, 1.5f, 0.0f));
    auto retry = StartPush(*job, MakePush(0, 0, {1.0f, 0.5f, -1.0f}));
    ASSERT_TRUE(retry->push.ok());
    EXPECT_TRUE(retry->push->duplicate());
    StartPush(*job, MakePush(1, 0, {0.25f, 0.25f, 0.25f}));
    served = PullNow(*job, 1);
    EXPECT_THAT(served[kRunning], ElementsAre(2.25f, 1.75f, 0.25f));
  }
  ReopenStore();
  auto job = Open(v1::ConsistencySpec::ASP);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(PullNow(*job, 1), served);
}

INSTANTIATE_TEST_SUITE_P(Stores, ServerJobBufferTest,
                         ::testing::Values(StoreKind::kMemory,
                                           StoreKind::kRocksDb),
                         testing::StoreKindName);

TEST(ModelBuffersTest, TheDigestLeavesBuffersOut) {
  v1::ModelSpec with = Model();
  v1::ModelSpec without = Model();
  without.mutable_tensors()->RemoveLast();
  auto a = ModelTensors(with);
  auto b = ModelTensors(without);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_TRUE((*a)[1].buffer);
  EXPECT_FALSE((*a)[0].buffer);
  EXPECT_EQ(ModelDigest(*a), ModelDigest(*b));
  // Declared as a parameter, the same tensor changes the digest.
  v1::ModelSpec as_parameter = Model();
  as_parameter.mutable_tensors(1)->set_buffer(false);
  auto c = ModelTensors(as_parameter);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(ModelDigest(*c), ModelDigest(*a));
}

TEST(ModelBuffersTest, AModelOfBuffersOnlyIsRefused) {
  v1::ModelSpec model = Model();
  model.mutable_tensors(0)->set_buffer(true);
  auto tensors = ModelTensors(model);
  EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tensors.status().message()),
              HasSubstr("model.tensors: an EXTERNAL model needs at least one "
                        "tensor that is not a buffer"));
}

}  // namespace
}  // namespace ps

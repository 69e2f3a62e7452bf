// One job's shards on a server: pulls, pushes applied exactly once, refusals
// that change nothing, BSP and SSP waiting, Close, and reloading from a store.
// Every test runs against MemoryShardStore and RocksDbShardStore.
#include "server/server_job.h"

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/float_codec.h"
#include "common/half_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/rocksdb_shard_store.h"
#include "server/server_metrics.h"
#include "tests/testing/server_job_store_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

using Values = std::map<uint64_t, std::vector<float>>;

constexpr float kLearningRate = 0.5f;
constexpr uint64_t kSeed = 7;
constexpr int64_t kMapVersion = 1;
constexpr char kJobId[] = "job-000001";

// Softmax regression 3 -> 2 in blocks of at most 4 values:
// dense0.weight (6 values) is two blocks, dense0.bias (2 values) one.
const uint64_t kW0 = BlockKey(0, 0);  // 4 values.
const uint64_t kW1 = BlockKey(0, 1);  // 2 values.
const uint64_t kB0 = BlockKey(1, 0);  // 2 values.

struct JobOptions {
  v1::ConsistencySpec::Model model = v1::ConsistencySpec::SSP;
  int32_t staleness = 0;
  int num_workers = 1;
  v1::Durability durability = v1::WAL;
  v1::NonFinitePolicy non_finite = v1::NON_FINITE_POLICY_UNSPECIFIED;
  bool adam = false;  // Adam (defaults) instead of plain SGD.
  bool lamb = false;  // LAMB (defaults): not range-wise (whole blocks).
};

v1::JobSpec Spec(const JobOptions& options) {
  v1::JobSpec spec;
  spec.set_name("tiny");
  spec.mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  spec.mutable_model()->set_input_dim(3);
  spec.mutable_model()->set_num_classes(2);
  auto* dataset = spec.mutable_dataset();
  dataset->set_format(v1::DatasetSpec::IDX);
  dataset->set_train_images("train-images");
  dataset->set_train_labels("train-labels");
  dataset->set_test_images("test-images");
  dataset->set_test_labels("test-labels");
  spec.set_epochs(1);
  spec.set_batch_size(1);
  spec.set_seed(kSeed);
  if (options.adam) {
    spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01f);
  } else if (options.lamb) {
    spec.mutable_optimizer()->mutable_lamb()->set_learning_rate(0.01f);
  } else {
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(kLearningRate);
  }
  spec.mutable_consistency()->set_model(options.model);
  spec.mutable_consistency()->set_staleness(options.staleness);
  spec.set_num_workers(options.num_workers);
  spec.set_num_servers(1);
  spec.set_block_elems(4);
  spec.set_durability(options.durability);
  spec.set_non_finite_gradients(options.non_finite);
  ApplyJobSpecDefaults(&spec);  // What the coordinator does at submit.
  return spec;
}

// An assignment for server 0 holding every block, built without the
// coordinator.
v1::Assignment MakeAssignment(const JobOptions& options) {
  v1::Assignment assignment;
  assignment.set_job_id(kJobId);
  *assignment.mutable_spec() = Spec(options);
  assignment.set_index(0);
  assignment.set_num_workers(options.num_workers);
  v1::ShardMap* map = assignment.mutable_shard_map();
  map->set_version(kMapVersion);
  map->add_servers("localhost:0");
  auto tensors = ModelTensors(assignment.spec().model());
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  for (const BlockSpec& b : SplitIntoBlocks(*tensors, 4)) {
    v1::BlockPlacement* p = map->add_blocks();
    p->set_key(b.key);
    p->set_server(0);
    p->set_num_elems(b.num_elems);
  }
  return assignment;
}

// The values every block starts with.
Values InitialValues() {
  auto tensors = ModelTensors(Spec({}).model());
  EXPECT_TRUE(tensors.ok());
  Values values;
  for (const BlockSpec& b : SplitIntoBlocks(*tensors, 4)) {
    values[b.key] = InitialBlockValues((*tensors)[b.tensor_index], b, kSeed);
  }
  return values;
}

// A gradient for every block, distinct per `salt`, exactly representable.
Values Gradients(int salt) {
  Values g;
  for (const auto& [key, v] : InitialValues()) {
    std::vector<float>& out = g[key];
    for (size_t i = 0; i < v.size(); ++i) {
      out.push_back(0.25f * static_cast<float>((salt + 1) * (i + 1)) *
                    (i % 2 ? -1.0f : 1.0f));
    }
  }
  return g;
}

// p - lr * g, block by block (SGD without momentum or decay).
Values Sgd(const Values& p, const Values& g) {
  Values out = p;
  for (auto& [key, v] : out) {
    for (size_t i = 0; i < v.size(); ++i) v[i] -= kLearningRate * g.at(key)[i];
  }
  return out;
}

// The element-wise mean of two gradients.
Values Mean(const Values& a, const Values& b) {
  Values out = a;
  for (auto& [key, v] : out) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = (v[i] + b.at(key)[i]) * 0.5f;
  }
  return out;
}

v1::PushRequest MakePush(int worker, int64_t clock, const Values& gradients,
                         int64_t version = kMapVersion) {
  v1::PushRequest request;
  request.set_job_id(kJobId);
  request.set_worker_index(worker);
  request.set_clock(clock);
  request.set_map_version(version);
  for (const auto& [key, g] : gradients) {
    v1::Block* block = request.add_gradients();
    block->set_key(key);
    EncodeFloats(g, block->mutable_data());
  }
  return request;
}

// The 16-bit encoding of `values` (FP16 or BF16) as wire bytes.
std::string EncodeGradient(const std::vector<float>& values,
                           v1::Precision encoding) {
  std::vector<uint16_t> bits(values.size());
  if (encoding == v1::FP16) {
    EncodeFp16(values, bits.data());
  } else {
    EncodeBf16(values, bits.data());
  }
  return std::string(reinterpret_cast<const char*>(bits.data()),
                     bits.size() * sizeof(uint16_t));
}

// MakePush with the gradients sent in a 16-bit `encoding`.
v1::PushRequest MakeEncodedPush(int worker, int64_t clock,
                                const Values& gradients,
                                v1::Precision encoding) {
  v1::PushRequest request = MakePush(worker, clock, {});
  request.set_gradient_encoding(encoding);
  for (const auto& [key, g] : gradients) {
    v1::Block* block = request.add_gradients();
    block->set_key(key);
    block->set_data(EncodeGradient(g, encoding));
  }
  return request;
}

// What the server gets from `gradients` sent in `encoding`: each value
// rounded to the format and decoded back to float32.
Values RoundTrip(const Values& gradients, v1::Precision encoding) {
  Values out;
  for (const auto& [key, g] : gradients) {
    const std::string bytes = EncodeGradient(g, encoding);
    std::vector<float>& v = out[key];
    v.resize(g.size());
    const auto* bits = reinterpret_cast<const uint16_t*>(bytes.data());
    if (encoding == v1::FP16) {
      DecodeFp16({bits, g.size()}, v.data());
    } else {
      DecodeBf16({bits, g.size()}, v.data());
    }
  }
  return out;
}

// Gradients that 16-bit formats do not hold exactly: pseudo-random
// magnitudes from 1e-9 to 1e5 (below fp16's subnormals, beyond its range).
Values RoughGradients(int salt) {
  Values g;
  uint32_t state = 12345u + 977u * salt;
  for (const auto& [key, v] : InitialValues()) {
    for (size_t i = 0; i < v.size(); ++i) {
      state = state * 1664525u + 1013904223u;
      const float unit = static_cast<float>(state >> 8) / (1u << 24);
      const float magnitude = std::pow(10.0f, -9.0f + 14.0f * unit);
      g[key].push_back((state & 1) ? magnitude : -magnitude);
    }
  }
  return g;
}

Values ValuesOf(const v1::PullResponse& reply) {
  Values values;
  for (const v1::Block& b : reply.blocks()) {
    std::vector<float>& v = values[b.key()];
    v.resize(FloatCount(b.data()));
    DecodeFloats(b.data(), v);
  }
  return values;
}

// The state of one Pull: whether its callback ran, and with what.
struct PullResult {
  int calls = 0;
  absl::StatusOr<v1::PullResponse> reply = absl::UnknownError("not called");
};

std::shared_ptr<PullResult> StartPull(ServerJob& job, int worker, int64_t clock,
                                      std::vector<uint64_t> keys = {},
                                      int64_t version = kMapVersion,
                                      bool final = false) {
  v1::PullRequest request;
  request.set_job_id(kJobId);
  request.set_worker_index(worker);
  request.set_clock(clock);
  request.set_map_version(version);
  request.set_final(final);
  for (uint64_t k : keys) request.add_keys(k);
  auto result = std::make_shared<PullResult>();
  job.Pull(request, [result](absl::StatusOr<v1::PullResponse> reply) {
    ++result->calls;
    result->reply = std::move(reply);
  });
  return result;
}

// The state of one Push: whether its callback ran (it is parked under BSP
// until the clock applies), and with what.
struct PushResult {
  int calls = 0;
  absl::StatusOr<v1::PushResponse> reply = absl::UnknownError("not called");
};

std::shared_ptr<PushResult> StartPush(ServerJob& job,
                                      const v1::PushRequest& request) {
  auto result = std::make_shared<PushResult>();
  job.Push(request, [result](absl::StatusOr<v1::PushResponse> reply) {
    ++result->calls;
    result->reply = std::move(reply);
  });
  // The update log is written on the job's writer thread: wait for it, so
  // that what the push completes has been answered.
  EXPECT_TRUE(job.Flush().ok());
  return result;
}

// A push that must be answered at once (applied, duplicate or refused).
absl::StatusOr<v1::PushResponse> PushNow(ServerJob& job,
                                         const v1::PushRequest& request) {
  auto result = StartPush(job, request);
  EXPECT_EQ(result->calls, 1) << "push was parked";
  return result->reply;
}

// Expects two sets of blocks to hold the same keys and (float-)equal values.
void ExpectValuesEq(const Values& actual, const Values& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [key, v] : expected) {
    ASSERT_TRUE(actual.contains(key)) << "block " << key;
    EXPECT_THAT(actual.at(key), Pointwise(::testing::FloatEq(), v))
        << "block " << key;
  }
}

using testing::StoreKind;

class ServerJobTest : public testing::ServerJobStoreFixture {
 protected:
  std::unique_ptr<ServerJob> Open(const JobOptions& options,
                                  const ServerJobOptions& job_options = {}) {
    auto job = ServerJob::Open(MakeAssignment(options), store_.get(), &metrics_,
                               job_options);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }

  // Pulls every block at `clock` as `worker`; the pull must complete at once.
  Values PullNow(ServerJob& job, int worker, int64_t clock) {
    auto result = StartPull(job, worker, clock);
    EXPECT_EQ(result->calls, 1) << "pull at clock " << clock << " waited";
    EXPECT_TRUE(result->reply.ok()) << result->reply.status();
    return result->reply.ok() ? ValuesOf(*result->reply) : Values{};
  }

  void ExpectPushOk(ServerJob& job, const v1::PushRequest& request,
                    bool duplicate = false) {
    auto response = PushNow(job, request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->duplicate(), duplicate);
  }

  // Serves `clocks` clocks of 2 workers, then reopens the job from the store
  // (snapshot and log only, as after a crash) and expects the served values
  // bit for bit. SSP pushes alternate FP32 and BF16, and one carries a NaN
  // that the job's NON_FINITE_DROP policy drops (logged, not applied).
  void ExpectReplayGivesTheServedState(int clocks, bool bsp, bool lamb,
                                       int64_t interval) {
    ASSERT_TRUE(store_->DeleteJob(kJobId).ok());
    const JobOptions options = {
        .model = bsp ? v1::ConsistencySpec::BSP : v1::ConsistencySpec::SSP,
        .staleness = bsp ? 0 : 3,
        .num_workers = 2,
        .non_finite =
            bsp ? v1::NON_FINITE_POLICY_UNSPECIFIED : v1::NON_FINITE_DROP,
        .adam = !lamb,
        .lamb = lamb};
    auto served = Open(options, {.snapshot_log_bytes = interval});
    ASSERT_NE(served, nullptr);
    std::vector<std::shared_ptr<PushResult>> pushes;
    for (int clock = 0; clock < clocks; ++clock) {
      for (int worker = 0; worker < 2; ++worker) {
        Values g = RoughGradients(clock * 2 + worker);
        if (!bsp && clock == 2 && worker == 1) {
          g.begin()->second[0] = std::numeric_limits<float>::quiet_NaN();
        }
        const v1::Precision encoding = bsp || worker == 0 ? v1::FP32 : v1::BF16;
        pushes.push_back(StartPush(
            *served, encoding == v1::FP32
                         ? MakePush(worker, clock, g)
                         : MakeEncodedPush(worker, clock, g, encoding)));
      }
    }
    for (const auto& push : pushes) {
      ASSERT_EQ(push->calls, 1);
      ASSERT_TRUE(push->reply.ok()) << push->reply.status();
    }
    const Values before = PullNow(*served, 0, clocks);

    absl::StatusOr<StoredJob> stored = store_->Load(kJobId);
    ASSERT_TRUE(stored.ok()) << stored.status();
    const size_t records = bsp ? clocks : 2 * clocks;
    EXPECT_EQ(stored->log_sequence + stored->log.size(), records);
    if (interval == 1) {
      EXPECT_EQ(stored->log.size(), 0u);
    }
    if (interval > 1000000) {
      EXPECT_EQ(stored->log.size(), records);
    }

    // Reopened while the served job is still open: nothing but the
    // snapshot and the log, as after a crash.
    auto reopened = Open(options, {.snapshot_log_bytes = interval});
    ASSERT_NE(reopened, nullptr);
    EXPECT_EQ(reopened->min_clock(), clocks);
    EXPECT_EQ(PullNow(*reopened, 0, clocks), before);
    reopened.reset();
    served.reset();
    stored = store_->Load(kJobId);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->log_sequence, static_cast<int64_t>(records));
    EXPECT_EQ(stored->log.size(), 0u);
  }
};

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

TEST_P(ServerJobTest, SixteenBitPushErrorsNameTheBlockAndTheEncoding) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  v1::PushRequest r = MakePush(0, 0, Gradients(0));  // 4 bytes a value.
  r.set_gradient_encoding(v1::BF16);
  absl::Status status = PushNow(*job, r).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat("gradients: block ", kW0,
                                     " has 16 bytes, expected 8 (4 values "
                                     "in BF16)")));
  r.set_gradient_encoding(static_cast<v1::Precision>(7));
  status = PushNow(*job, r).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("gradient_encoding: 7 is not an encoding"));
  EXPECT_EQ(PullNow(*job, 0, 0), InitialValues());
  EXPECT_EQ(job->min_clock(), 0);
}

TEST_P(ServerJobTest, NonFiniteSixteenBitPushIsRefusedAndChangesNothing) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      Values g = Gradients(0);
      g[kB0][1] = bad;
      auto response = PushNow(*job, MakeEncodedPush(0, 0, g, encoding));
      EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(response.status().message()),
                  HasSubstr(absl::StrCat("block ", kB0, " contains NaN")));
    }
  }
  // A finite float32 beyond fp16's range is sent saturated, and applied.
  Values huge = Gradients(0);
  huge[kW0][0] = 1e9f;
  ExpectPushOk(*job, MakeEncodedPush(0, 0, huge, v1::FP16));
  Values saturated = Gradients(0);
  saturated[kW0][0] = 65504.0f;
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), saturated));
}

// A push in FP16 or BF16 gives exactly the values of the same push in FP32
// after the round trip through the format, under SGD (with momentum) and
// Adam, SSP and BSP, over several clocks: the server decodes exactly and
// then runs the float32 path unchanged.
TEST_P(ServerJobTest, SixteenBitPushAppliesExactlyItsDecodedGradients) {
  for (v1::Precision encoding : {v1::FP16, v1::BF16}) {
    for (bool adam : {false, true}) {
      for (auto model : {v1::ConsistencySpec::SSP, v1::ConsistencySpec::BSP}) {
        SCOPED_TRACE(absl::StrCat(
            v1::Precision_Name(encoding), adam ? " adam " : " sgd ",
            model == v1::ConsistencySpec::BSP ? "BSP" : "SSP"));
        // Two jobs side by side: MEMORY durability keeps them out of the
        // store (they share a job id).
        const JobOptions options = {.model = model,
                                    .staleness = 0,
                                    .num_workers = 2,
                                    .durability = v1::MEMORY,
                                    .adam = adam};
        auto wire = Open(options);
        auto reference = Open(options);
        ASSERT_NE(wire, nullptr);
        ASSERT_NE(reference, nullptr);
        for (int clock = 0; clock < 3; ++clock) {
          for (int worker = 0; worker < 2; ++worker) {
            const Values g = RoughGradients(2 * clock + worker);
            auto a =
                StartPush(*wire, MakeEncodedPush(worker, clock, g, encoding));
            auto b = StartPush(*reference,
                               MakePush(worker, clock, RoundTrip(g, encoding)));
            EXPECT_EQ(a->calls, b->calls);
          }
        }
        const Values got = PullNow(*wire, 0, 3);
        EXPECT_EQ(got, PullNow(*reference, 0, 3));  // Bit for bit.
        EXPECT_NE(got, InitialValues());
      }
    }
  }
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

TEST_P(ServerJobTest, DropPolicyAcknowledgesANonFinitePushWithoutApplyingIt) {
  auto job = Open({.non_finite = v1::NON_FINITE_DROP});
  ASSERT_NE(job, nullptr);
  Values bad = Gradients(0);
  bad[kW1][1] = std::numeric_limits<float>::infinity();
  ExpectPushOk(*job, MakePush(0, 0, bad));
  EXPECT_EQ(job->min_clock(), 1);
  EXPECT_EQ(metrics_.gradients_dropped.Value(), 1);
  EXPECT_EQ(metrics_.pushes_rejected.Value(), 0);
  // Nothing of it was applied, not even its finite blocks.
  ExpectValuesEq(PullNow(*job, 0, 1), InitialValues());
  // The clock advanced durably, so a retry is a duplicate.
  ExpectPushOk(*job, MakePush(0, 0, bad), /*duplicate=*/true);
  const Values g1 = Gradients(1);
  ExpectPushOk(*job, MakePush(0, 1, g1));
  ExpectValuesEq(PullNow(*job, 0, 2), Sgd(InitialValues(), g1));
}

TEST_P(ServerJobTest, RefusePolicyIsTheDefaultAndNamesTheBlock) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  Values bad = Gradients(0);
  bad[kB0][0] = std::numeric_limits<float>::quiet_NaN();
  auto refused = PushNow(*job, MakePush(0, 0, bad));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(absl::StrCat("gradients: block ", kB0)));
  EXPECT_EQ(job->min_clock(), 0);
  EXPECT_EQ(metrics_.gradients_dropped.Value(), 0);
}

TEST_P(ServerJobTest, BspDropPolicyAveragesTheOthersOverAllWorkers) {
  auto job = Open({.model = v1::ConsistencySpec::BSP,
                   .num_workers = 2,
                   .non_finite = v1::NON_FINITE_DROP});
  ASSERT_NE(job, nullptr);
  Values bad = Gradients(0);
  bad[kW0][2] = std::numeric_limits<float>::quiet_NaN();
  auto dropped = StartPush(*job, MakePush(0, 0, bad));
  EXPECT_EQ(dropped->calls, 0);  // Parked like any BSP push.
  const Values g1 = Gradients(1);
  ExpectPushOk(*job, MakePush(1, 0, g1));
  ASSERT_EQ(dropped->calls, 1);
  ASSERT_TRUE(dropped->reply.ok()) << dropped->reply.status();
  Values zero = g1;
  for (auto& [key, v] : zero) std::fill(v.begin(), v.end(), 0.0f);
  ExpectValuesEq(PullNow(*job, 0, 1), Sgd(InitialValues(), Mean(zero, g1)));
}

TEST_P(ServerJobTest, WaitingPullsOfOneWorkerAreBoundedAndOthersUnaffected) {
  auto job = Open(
      {.model = v1::ConsistencySpec::SSP, .staleness = 0, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  ExpectPushOk(*job, MakePush(0, 0, Gradients(0)));
  std::vector<std::shared_ptr<PullResult>> waiting;
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

INSTANTIATE_TEST_SUITE_P(Stores, ServerJobTest,
                         ::testing::Values(StoreKind::kMemory,
                                           StoreKind::kRocksDb),
                         testing::StoreKindName);

}  // namespace
}  // namespace ps

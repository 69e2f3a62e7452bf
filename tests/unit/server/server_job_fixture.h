// The tiny job of server_job_test and its server_job_*_test neighbours:
// softmax regression 3 -> 2 on one server, its initial values, gradients and
// the expected SGD results, requests of its worker, and ServerJobTest, a test
// run against MemoryShardStore and RocksDbShardStore (its suite is
// instantiated once, in server_job_test.cc).
#ifndef PS_TESTS_UNIT_SERVER_SERVER_JOB_FIXTURE_H_
#define PS_TESTS_UNIT_SERVER_SERVER_JOB_FIXTURE_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/float_codec.h"
#include "common/half_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_job.h"
#include "tests/testing/server_job_calls.h"
#include "tests/testing/server_job_store_fixture.h"

namespace ps::server_job_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

using Values = testing::BlockValues;
using testing::PullResult;
using testing::PushResult;
using testing::StartPush;
using testing::StoreKind;
using testing::ValuesOf;

inline constexpr float kLearningRate = 0.5f;
inline constexpr uint64_t kSeed = 7;
inline constexpr int64_t kMapVersion = 1;
inline constexpr char kJobId[] = "job-000001";

// Softmax regression 3 -> 2 in blocks of at most 4 values:
// dense0.weight (6 values) is two blocks, dense0.bias (2 values) one.
inline const uint64_t kW0 = BlockKey(0, 0);  // 4 values.
inline const uint64_t kW1 = BlockKey(0, 1);  // 2 values.
inline const uint64_t kB0 = BlockKey(1, 0);  // 2 values.

// What the tests vary of the tiny job.
struct JobOptions {
  v1::ConsistencySpec::Model model = v1::ConsistencySpec::SSP;
  int32_t staleness = 0;
  int num_workers = 1;
  v1::Durability durability = v1::WAL;
  v1::NonFinitePolicy non_finite = v1::NON_FINITE_POLICY_UNSPECIFIED;
  bool adam = false;  // Adam (defaults) instead of plain SGD.
  bool lamb = false;  // LAMB (defaults): not range-wise (whole blocks).
  int32_t pipeline_parts = 0;  // ConsistencySpec.pipeline_parts (0: none).
};

// The job's spec, completed as the coordinator completes it at submit.
inline v1::JobSpec Spec(const JobOptions& options) {
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
  spec.mutable_consistency()->set_pipeline_parts(options.pipeline_parts);
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
inline v1::Assignment MakeAssignment(const JobOptions& options) {
  v1::Assignment assignment;
  assignment.set_job_id(kJobId);
  *assignment.mutable_spec() = Spec(options);
  assignment.set_index(0);
  assignment.set_num_workers(options.num_workers);
  v1::ShardMap* map = assignment.mutable_shard_map();
  map->set_version(kMapVersion);
  map->add_servers("localhost:0");
  testing::PlaceEveryBlockOnServer0(&assignment, 4);
  return assignment;
}

// The values every block starts with.
inline Values InitialValues() {
  auto tensors = ModelTensors(Spec({}).model());
  EXPECT_TRUE(tensors.ok());
  Values values;
  for (const BlockSpec& b : SplitIntoBlocks(*tensors, 4)) {
    values[b.key] = InitialBlockValues((*tensors)[b.tensor_index], b, kSeed);
  }
  return values;
}

// A gradient for every block, distinct per `salt`, exactly representable.
inline Values Gradients(int salt) {
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
inline Values Sgd(const Values& p, const Values& g) {
  Values out = p;
  for (auto& [key, v] : out) {
    for (size_t i = 0; i < v.size(); ++i) v[i] -= kLearningRate * g.at(key)[i];
  }
  return out;
}

// The element-wise mean of two gradients.
inline Values Mean(const Values& a, const Values& b) {
  Values out = a;
  for (auto& [key, v] : out) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = (v[i] + b.at(key)[i]) * 0.5f;
  }
  return out;
}

// A float32 push of `worker` at `clock`.
inline v1::PushRequest MakePush(int worker, int64_t clock,
                                const Values& gradients,
                                int64_t version = kMapVersion) {
  return testing::FloatPush(kJobId, worker, clock, version, gradients);
}

// The 16-bit encoding of `values` (FP16 or BF16) as wire bytes.
inline std::string EncodeGradient(const std::vector<float>& values,
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
inline v1::PushRequest MakeEncodedPush(int worker, int64_t clock,
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
inline Values RoundTrip(const Values& gradients, v1::Precision encoding) {
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
inline Values RoughGradients(int salt) {
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

inline std::shared_ptr<PullResult> StartPull(ServerJob& job, int worker,
                                             int64_t clock,
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
  return testing::SendPull(job, request);
}

// A push that must be answered at once (applied, duplicate or refused).
inline absl::StatusOr<v1::PushResponse> PushNow(
    ServerJob& job, const v1::PushRequest& request) {
  auto result = StartPush(job, request);
  EXPECT_EQ(result->calls, 1) << "push was parked";
  return result->reply;
}

// Expects two sets of blocks to hold the same keys and (float-)equal values.
inline void ExpectValuesEq(const Values& actual, const Values& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [key, v] : expected) {
    ASSERT_TRUE(actual.contains(key)) << "block " << key;
    EXPECT_THAT(actual.at(key), Pointwise(::testing::FloatEq(), v))
        << "block " << key;
  }
}

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

}  // namespace ps::server_job_test

#endif  // PS_TESTS_UNIT_SERVER_SERVER_JOB_FIXTURE_H_

// The server side of training techniques: the learning rate of each update
// follows the job's schedule by clock (SSP and BSP), ps_learning_rate shows
// it, and LAMB gets whole blocks however the push's bytes are cut.
#include <map>
#include <memory>
#include <vector>

#include "common/float_codec.h"
#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/optimizer.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using Values = std::map<uint64_t, std::vector<float>>;

class ServerJobScheduleTest : public ::testing::Test {
 protected:
  // Opens softmax regression `input_dim` -> 2 in blocks of `block_elems`
  // values on one server, MEMORY durability.
  void Open(int input_dim, int block_elems, int workers,
            const std::function<void(v1::JobSpec*)>& customize) {
    assignment_ =
        testing::TinyAssignment("job-000001", input_dim, 2, block_elems,
                                workers, "localhost:0", [&](v1::JobSpec* spec) {
                                  spec->set_durability(v1::MEMORY);
                                  customize(spec);
                                });
    auto job = ServerJob::Open(assignment_, nullptr, &metrics_);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
  }

  Values Pull(int worker, int64_t clock) {
    v1::PullRequest request;
    request.set_job_id("job-000001");
    request.set_worker_index(worker);
    request.set_clock(clock);
    request.set_map_version(1);
    Values values;
    bool called = false;
    job_->Pull(request, [&](absl::StatusOr<v1::PullResponse> reply) {
      called = true;
      ASSERT_TRUE(reply.ok()) << reply.status();
      for (const v1::Block& b : reply->blocks()) {
        values[b.key()].resize(FloatCount(b.data()));
        DecodeFloats(b.data(), values[b.key()]);
      }
    });
    EXPECT_TRUE(called) << "the pull waited";
    return values;
  }

  // Pushes `g` as `worker` at `clock`; returns whether it was answered at
  // once (BSP parks all but the last worker's).
  bool Push(int worker, int64_t clock, const Values& g) {
    v1::PushRequest request;
    request.set_job_id("job-000001");
    request.set_worker_index(worker);
    request.set_clock(clock);
    request.set_map_version(1);
    for (const auto& [key, values] : g) {
      v1::Block* b = request.add_gradients();
      b->set_key(key);
      EncodeFloats(values, b->mutable_data());
    }
    bool answered = false;
    job_->Push(request, [&answered](absl::StatusOr<v1::PushResponse> reply) {
      EXPECT_TRUE(reply.ok()) << reply.status();
      answered = true;
    });
    return answered;
  }

  // A gradient for every block, distinct per `salt`.
  Values Gradient(const Values& like, int salt) {
    Values g;
    for (const auto& [key, v] : like) {
      for (size_t i = 0; i < v.size(); ++i) {
        g[key].push_back(0.25f * static_cast<float>((salt + 1) * (i % 7 + 1)) *
                         (i % 2 ? -1.0f : 1.0f));
      }
    }
    return g;
  }

  prometheus::Registry registry_;
  ServerMetrics metrics_{registry_};
  v1::Assignment assignment_;
  std::unique_ptr<ServerJob> job_;
};

TEST_F(ServerJobScheduleTest, SspUpdatesUseTheRateOfTheirClock) {
  // SGD lr 1 halving every clock: updates at 1, 0.5, 0.25.
  Open(3, 4, 1, [](v1::JobSpec* spec) {
    spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
    auto* step =
        spec->mutable_optimizer()->mutable_schedule()->mutable_step_decay();
    step->set_step_clocks(1);
    step->set_gamma(0.5f);
    spec->mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
  });
  const Values initial = Pull(0, 0);
  Values expected = initial;
  const float rates[] = {1.0f, 0.5f, 0.25f};
  for (int clock = 0; clock < 3; ++clock) {
    const Values g = Gradient(initial, clock);
    ASSERT_TRUE(Push(0, clock, g));
    for (auto& [key, v] : expected) {
      for (size_t i = 0; i < v.size(); ++i) v[i] -= rates[clock] * g.at(key)[i];
    }
    EXPECT_FLOAT_EQ(metrics_.learning_rate.Value(), rates[clock]);
  }
  const Values after = Pull(0, 3);
  for (const auto& [key, v] : expected) {
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_FLOAT_EQ(after.at(key)[i], v[i]) << key << " " << i;
    }
  }
}

TEST_F(ServerJobScheduleTest, BspAppliesOneUpdateAtTheClocksRate) {
  // SGD lr 0.5 with a linear warmup of 2 clocks: 0.25 at clock 0, 0.5 at 1.
  Open(3, 4, 2, [](v1::JobSpec* spec) {
    spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.5f);
    spec->mutable_optimizer()->mutable_schedule()->set_warmup_clocks(2);
  });
  const Values initial = Pull(0, 0);
  Values expected = initial;
  const float rates[] = {0.25f, 0.5f};
  for (int clock = 0; clock < 2; ++clock) {
    const Values a = Gradient(initial, 2 * clock),
                 b = Gradient(initial, 2 * clock + 1);
    EXPECT_FALSE(Push(0, clock, a));  // Parked until worker 1's push.
    EXPECT_TRUE(Push(1, clock, b));
    EXPECT_FLOAT_EQ(metrics_.learning_rate.Value(), rates[clock]);
    for (auto& [key, v] : expected) {
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] -= rates[clock] * (a.at(key)[i] + b.at(key)[i]) * 0.5f;
      }
    }
  }
  const Values after = Pull(0, 2);
  for (const auto& [key, v] : expected) {
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_NEAR(after.at(key)[i], v[i], 1e-6) << key << " " << i;
    }
  }
}

TEST_F(ServerJobScheduleTest, LambUnderSspGetsWholeBlocks) {
  // Blocks of 5,000 values: a push's bytes are applied 4,096 at a time by
  // range-wise optimizers, but LAMB's trust ratio needs the whole block.
  Open(3000, 5000, 1, [](v1::JobSpec* spec) {
    spec->mutable_optimizer()->mutable_lamb()->set_learning_rate(0.01f);
    spec->mutable_optimizer()->mutable_lamb()->set_weight_decay(0.01f);
    spec->mutable_consistency()->set_model(v1::ConsistencySpec::ASP);
  });
  const Values initial = Pull(0, 0);
  ASSERT_EQ(initial.begin()->second.size(), 5000u);
  v1::OptimizerSpec lamb = assignment_.spec().optimizer();
  auto optimizer = Optimizer::Create(lamb);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  Values expected = initial;
  std::map<uint64_t, std::vector<float>> state;
  std::map<uint64_t, int64_t> steps;
  for (int clock = 0; clock < 2; ++clock) {
    const Values g = Gradient(initial, clock);
    ASSERT_TRUE(Push(0, clock, g));
    for (auto& [key, v] : expected) {
      state[key].resize(2 * v.size(), 0.0f);
      (*optimizer)->Apply(v, g.at(key), state[key], &steps[key]);
    }
  }
  const Values after = Pull(0, 2);
  for (const auto& [key, v] : expected) {
    EXPECT_EQ(after.at(key), v) << key;
    EXPECT_NE(after.at(key), initial.at(key)) << key;
  }
}

}  // namespace
}  // namespace ps

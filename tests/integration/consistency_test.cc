// The consistency models as tested facts (docs/consistency.md): BSP equals one
// big batch, the SSP bound holds under random delays, ASP never waits, pushes
// are applied exactly once when replies are lost, and the worker cache respects
// the bound. Real parameter servers on loopback; no coordinator (the tests
// assign jobs).
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/idx_reader.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/model_layout.h"
#include "coordinator/shard_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optimizer.h"
#include "server/parameter_server.h"
#include "tests/testing/bsp_training.h"
#include "tests/testing/parameter_server_test_peer.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/server_group.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/batcher.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"
#include "worker/parameter_client.h"
#include "worker/step_pipeline.h"
#include "worker/trainer.h"

namespace ps {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist/";

v1::Assignment ForWorker(v1::Assignment a, int worker) {
  a.set_index(worker);
  return a;
}

// ---------------------------------------------------------------------------
// A counting model: softmax regression with input_dim = number of workers and
// SGD with learning rate 1. Worker w's push at any clock has gradient -1 at
// weight[w][0] and 0 elsewhere, so weight[w][0] - initial = the number of
// worker w's pushes the values contain. The values themselves witness which
// updates a read saw, independent of the server's bookkeeping.

v1::JobSpec CountingSpec(int workers, v1::ConsistencySpec::Model model,
                         int staleness) {
  v1::JobSpec spec = testing::TinySpec(workers, 2);
  spec.set_name("counting");
  spec.set_seed(3);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_consistency()->set_staleness(staleness);
  if (model == v1::ConsistencySpec::SSP) {
    spec.mutable_consistency()->set_worker_cache(true);
  }
  spec.set_num_workers(workers);
  spec.set_num_servers(2);
  // One value per block, so both servers hold parts of the weight.
  spec.set_block_elems(1);
  return spec;
}

std::vector<std::vector<float>> CountingGradient(const v1::JobSpec& spec,
                                                 int worker) {
  auto tensors = ModelTensors(spec.model());
  std::vector<std::vector<float>> grads;
  for (const TensorSpec& t : *tensors) grads.emplace_back(t.num_elems(), 0.0f);
  grads[0][worker * 2] = -1.0f;  // weight[worker][0]
  return grads;
}

// The parameters before any update, as every server initialises its blocks.
std::vector<std::vector<float>> InitialParams(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  return testing::InitialParameters(spec);
}

// How many pushes of each worker `params` contain.
std::vector<int64_t> Counts(const std::vector<std::vector<float>>& params,
                            const std::vector<std::vector<float>>& initial,
                            int workers) {
  std::vector<int64_t> counts(workers);
  for (int w = 0; w < workers; ++w) {
    counts[w] = std::lround(params[0][w * 2] - initial[0][w * 2]);
  }
  return counts;
}

struct BoundCase {
  int workers;
  int staleness;
  uint32_t seed;
  bool cache;
  // The trainer's pipeline: pushes go through an AsyncPusher, overlapping
  // the next pull, and the next step's pull through an AsyncPuller, made
  // before this step's "compute".
  bool pipeline = false;
};

// Runs `clocks` iterations on each of `workers` threads with random per-worker
// delays; checks every read against the bound. Returns the largest drift seen.
int64_t RunSspUnderStress(const BoundCase& c, int clocks) {
  ServerGroup servers(2, "");
  const v1::JobSpec spec =
      CountingSpec(c.workers, v1::ConsistencySpec::SSP, c.staleness);
  const v1::Assignment assignment = servers.Assign(spec, c.workers);
  ParameterClientOptions options;
  options.cache = c.cache;

  const std::vector<std::vector<float>> initial = InitialParams(spec);
  absl::Mutex mu;
  int64_t max_drift = 0;
  std::vector<std::thread> threads;
  for (int w = 0; w < c.workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(c.seed * 131 + w);
      // Each worker has its own speed; some are several times slower.
      std::uniform_int_distribution<int> speed(0, 3);
      const int slowness = speed(rng);
      std::uniform_int_distribution<int> jitter(0, 1000);
      auto client = ParameterClient::Create(ForWorker(assignment, w),
                                            *ModelTensors(spec.model()),
                                            options, nullptr);
      ASSERT_TRUE(client.ok());
      const auto grads = CountingGradient(spec, w);
      std::vector<std::vector<float>> pulled[2];
      std::optional<AsyncPusher> pusher;
      std::optional<AsyncPuller> puller;
      if (c.pipeline) {
        pusher.emplace(client->get());
        puller.emplace(client->get());
        puller->Start(0, &pulled[0]);
      }
      for (int64_t clock = 0; clock < clocks; ++clock) {
        std::vector<std::vector<float>>& params = pulled[clock % 2];
        if (puller.has_value()) {
          const AsyncPuller::Result read = puller->Wait();
          ASSERT_TRUE(read.status.ok()) << read.status;
          ASSERT_EQ(read.clock, clock);
          if (clock + 1 < clocks) {
            puller->Start(clock + 1, &pulled[(clock + 1) % 2]);
          }
        } else {
          ASSERT_TRUE((*client)->Pull(clock, &params).ok());
        }
        const std::vector<int64_t> counts = Counts(params, initial, c.workers);
        const int64_t slowest = *std::min_element(counts.begin(), counts.end());
        // No update of a clock below clock - s may be missing from the read.
        EXPECT_GE(slowest, clock - c.staleness)
            << "worker " << w << " at clock " << clock;
        // Nothing from the future: a worker's own count never exceeds its
        // clock.
        EXPECT_LE(counts[w], clock);
        {
          absl::MutexLock lock(&mu);
          max_drift = std::max(max_drift, clock - slowest);
        }
        std::this_thread::sleep_for(
            std::chrono::microseconds(jitter(rng) * slowness));
        if (pusher.has_value()) {
          const AsyncPusher::Result previous = pusher->Wait();
          ASSERT_TRUE(previous.status.ok()) << previous.status;
          ASSERT_EQ(previous.clock, clock - 1);
          pusher->Start(clock, &grads);
        } else {
          ASSERT_TRUE((*client)->Push(clock, grads).ok());
        }
      }
      if (pusher.has_value()) {
        ASSERT_TRUE(pusher->Wait().status.ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  // Every push applied exactly once.
  auto client = ParameterClient::Create(
      ForWorker(assignment, 0), *ModelTensors(spec.model()), options, nullptr);
  std::vector<std::vector<float>> final_params;
  EXPECT_TRUE((*client)->Pull(clocks, &final_params).ok());
  for (int64_t count : Counts(final_params, initial, c.workers)) {
    EXPECT_EQ(count, clocks);
  }
  return max_drift;
}

TEST(SspBoundTest, NoReadMissesAnUpdateOlderThanTheBound) {
  for (int workers : {2, 3, 4}) {
    for (int staleness : {0, 1, 3}) {
      for (uint32_t seed : {1u, 2u, 3u}) {
        // (cache, the trainer's pipeline): off/off, on/off, off/on.
        for (auto [cache, pipeline] :
             {std::pair{false, false}, std::pair{true, false},
              std::pair{false, true}}) {
          SCOPED_TRACE(absl::StrCat("workers=", workers, " s=", staleness,
                                    " seed=", seed, " cache=", cache,
                                    " pipeline=", pipeline));
          const int64_t drift = RunSspUnderStress(
              {workers, staleness, seed, cache, pipeline}, 24);
          // The fastest reader is never more than s clocks ahead of the
          // slowest.
          EXPECT_LE(drift, staleness);
        }
      }
    }
  }
}

// A worker that never pushes holds SSP readers back exactly at the bound.
TEST(SspBoundTest, ReadBeyondTheBoundWaitsForTheSlowestWorker) {
  ServerGroup servers(2, "");
  const v1::JobSpec spec = CountingSpec(2, v1::ConsistencySpec::SSP, 2);
  const v1::Assignment assignment = servers.Assign(spec, 2);
  ParameterClientOptions options;
  options.cache = false;
  options.pull_timeout = absl::Milliseconds(300);
  options.retry_window = absl::ZeroDuration();
  auto client = ParameterClient::Create(
      ForWorker(assignment, 0), *ModelTensors(spec.model()), options, nullptr);
  const auto grads = CountingGradient(spec, 0);
  std::vector<std::vector<float>> params;
  for (int64_t clock = 0; clock <= 2; ++clock) {
    ASSERT_TRUE((*client)->Pull(clock, &params).ok()) << clock;
    ASSERT_TRUE((*client)->Push(clock, grads).ok());
  }
  // Clock 3 needs worker 1 at clock >= 1; it is at 0.
  absl::Status blocked = (*client)->Pull(3, &params);
  EXPECT_EQ(blocked.code(), absl::StatusCode::kDeadlineExceeded) << blocked;

  // Once worker 1 pushes clock 0, the read goes through.
  auto slow = ParameterClient::Create(
      ForWorker(assignment, 1), *ModelTensors(spec.model()), options, nullptr);
  ASSERT_TRUE((*slow)->Push(0, CountingGradient(spec, 1)).ok());
  EXPECT_TRUE((*client)->Pull(3, &params).ok());
}

// The trainer's pushes in flight: every push reported with its clock, errors
// surfaced, a pull ahead of the pushes served once they land.
TEST(AsyncPusherTest, ReportsEachPushAndItsErrors) {
  ServerGroup servers(2, "");
  const v1::JobSpec spec = CountingSpec(1, v1::ConsistencySpec::SSP, 0);
  const v1::Assignment assignment = servers.Assign(spec, 1);
  ParameterClientOptions options;
  options.cache = false;
  auto client = ParameterClient::Create(
      ForWorker(assignment, 0), *ModelTensors(spec.model()), options, nullptr);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<std::vector<float>> initial = InitialParams(spec);
  const auto grads = CountingGradient(spec, 0);
  std::vector<std::vector<float>> params;
  {
    AsyncPusher pusher(client->get());
    AsyncPusher::Result none = pusher.Wait();
    EXPECT_EQ(none.clock, -1);
    EXPECT_TRUE(none.status.ok());
    for (int64_t clock = 0; clock < 5; ++clock) {
      pusher.Start(clock, &grads);
      AsyncPusher::Result pushed = pusher.Wait();
      EXPECT_EQ(pushed.clock, clock);
      EXPECT_TRUE(pushed.status.ok()) << pushed.status;
      EXPECT_GT(pushed.duration, absl::ZeroDuration());
    }
    // A refused push is reported by Wait and changes nothing.
    const std::vector<std::vector<float>> wrong_shape(1);
    pusher.Start(5, &wrong_shape);
    AsyncPusher::Result refused = pusher.Wait();
    EXPECT_EQ(refused.clock, 5);
    EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE((*client)->Pull(5, &params).ok());
    EXPECT_EQ(Counts(params, initial, 1)[0], 5);
    // With the push of clock 5 in flight the worker may already read at
    // clock 6; the read waits for that push (s = 0) and contains it.
    pusher.Start(5, &grads);
    ASSERT_TRUE((*client)->Pull(6, &params).ok());
    EXPECT_EQ(Counts(params, initial, 1)[0], 6);
    EXPECT_TRUE(pusher.Wait().status.ok());
    // Three clocks beyond the recorded pushes is refused (two are allowed:
    // the next step's pull with this step's push in flight).
    EXPECT_EQ((*client)->Pull(9, &params).code(),
              absl::StatusCode::kFailedPrecondition);
    // Destroying the pusher waits for the push in flight.
    pusher.Start(6, &grads);
  }
  ASSERT_TRUE((*client)->Pull(7, &params).ok());
  EXPECT_EQ(Counts(params, initial, 1)[0], 7);
}

// A pull made ahead and parked on the servers (BSP: clock 0 never completes)
// ends with CANCELLED once the client is cancelled, not at its deadline; the
// client refuses everything after.
TEST(AsyncPullerTest, CancelEndsAPullParkedOnTheServers) {
  ServerGroup servers(2, "");
  const v1::JobSpec spec = CountingSpec(2, v1::ConsistencySpec::BSP, 0);
  const v1::Assignment assignment = servers.Assign(spec, 2);
  ParameterClientOptions options;
  options.pull_timeout = absl::Seconds(60);
  options.retry_window = absl::Seconds(120);
  auto client = ParameterClient::Create(
      ForWorker(assignment, 0), *ModelTensors(spec.model()), options, nullptr);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<std::vector<float>> params;
  AsyncPuller puller(client->get());
  puller.Start(1, &params);
  EXPECT_TRUE(puller.busy());
  // Let the pull reach the servers and park (not required: a pull cancelled
  // before it starts ends the same way).
  absl::SleepFor(absl::Milliseconds(200));
  (*client)->Cancel();
  const AsyncPuller::Result read = puller.Wait();
  EXPECT_EQ(read.clock, 1);
  EXPECT_EQ(read.status.code(), absl::StatusCode::kCancelled) << read.status;
  EXPECT_FALSE(puller.busy());
  EXPECT_EQ((*client)->Push(0, CountingGradient(spec, 0)).code(),
            absl::StatusCode::kCancelled);
  // Nothing was applied.
  auto other = ParameterClient::Create(
      ForWorker(assignment, 1), *ModelTensors(spec.model()), options, nullptr);
  ASSERT_TRUE((*other)->Pull(0, &params).ok());
  EXPECT_EQ(params, InitialParams(spec));
}

TEST(AspTest, NeverWaits) {
  ServerGroup servers(2, "");
  const v1::JobSpec spec = CountingSpec(2, v1::ConsistencySpec::ASP, 0);
  const v1::Assignment assignment = servers.Assign(spec, 2);
  ParameterClientOptions options;
  options.pull_timeout = absl::Milliseconds(500);
  options.retry_window = absl::ZeroDuration();
  auto client = ParameterClient::Create(
      ForWorker(assignment, 0), *ModelTensors(spec.model()), options, nullptr);
  const auto grads = CountingGradient(spec, 0);
  std::vector<std::vector<float>> params;
  // Worker 1 never runs; worker 0 goes 50 clocks ahead without waiting.
  for (int64_t clock = 0; clock < 50; ++clock) {
    ASSERT_TRUE((*client)->Pull(clock, &params).ok()) << clock;
    ASSERT_TRUE((*client)->Push(clock, grads).ok());
  }
  EXPECT_EQ((*client)->pulls_saved(), 0);  // ASP keeps no cache.
}

TEST(WorkerCacheTest, SavesPullsWithinTheBoundOnly) {
  ServerGroup servers(2, "");
  const v1::JobSpec spec = CountingSpec(1, v1::ConsistencySpec::SSP, 3);
  const v1::Assignment assignment = servers.Assign(spec, 1);
  auto client = ParameterClient::Create(ForWorker(assignment, 0),
                                        *ModelTensors(spec.model()),
                                        ParameterClientOptions(), nullptr);
  const auto grads = CountingGradient(spec, 0);
  const std::vector<std::vector<float>> initial = InitialParams(spec);
  std::vector<std::vector<float>> params;
  for (int64_t clock = 0; clock < 20; ++clock) {
    ASSERT_TRUE((*client)->Pull(clock, &params).ok());
    // The read holds every update older than clock - 3.
    EXPECT_GE(Counts(params, initial, 1)[0], clock - 3) << clock;
    ASSERT_TRUE((*client)->Push(clock, grads).ok());
  }
  // A single worker: a pull at clock c returns min_clock c and serves c..c+3,
  // so only the pulls at clocks 0, 4, 8, 12 and 16 go to the servers.
  EXPECT_EQ((*client)->pulls_made(), 5);
  EXPECT_EQ((*client)->pulls_saved(), 15);
}

TEST(WorkerCacheTest, IsOffUnlessTheJobAsksForIt) {
  ServerGroup servers(1, "");
  v1::JobSpec spec = CountingSpec(1, v1::ConsistencySpec::SSP, 3);
  spec.mutable_consistency()->set_worker_cache(false);
  const v1::Assignment assignment = servers.Assign(spec, 1);
  auto client = ParameterClient::Create(ForWorker(assignment, 0),
                                        *ModelTensors(spec.model()),
                                        ParameterClientOptions(), nullptr);
  const auto grads = CountingGradient(spec, 0);
  std::vector<std::vector<float>> params;
  for (int64_t clock = 0; clock < 8; ++clock) {
    ASSERT_TRUE((*client)->Pull(clock, &params).ok());
    ASSERT_TRUE((*client)->Push(clock, grads).ok());
  }
  EXPECT_EQ((*client)->pulls_made(), 8);
  EXPECT_EQ((*client)->pulls_saved(), 0);
}

// ---------------------------------------------------------------------------
// Exactly once: replies are dropped or delayed past the client's deadline after
// the server applied the push; the client retries; each push counts once.

class ExactlyOnceTest : public ::testing::TestWithParam<bool> {};

TEST_P(ExactlyOnceTest, RetriedPushesAreAppliedOnce) {
  const bool rocksdb = GetParam();
  const testing::ScopedTempDir temp{"ps-consistency"};
  const std::string dir = rocksdb ? temp.path() : "";
  std::atomic<int> dropped{0}, delayed{0};
  {
    absl::Mutex mu;
    std::mt19937 rng(11);
    ServerGroup servers(2, dir, [&](const v1::PushRequest&) {
      absl::MutexLock lock(&mu);
      PushFault fault;
      const int roll = rng() % 10;
      if (roll < 3) {
        fault.drop_reply = true;
        ++dropped;
      } else if (roll == 3) {
        fault.delay_reply = absl::Milliseconds(250);  // Past the deadline.
        ++delayed;
      }
      return fault;
    });
    for (auto model : {v1::ConsistencySpec::SSP, v1::ConsistencySpec::BSP}) {
      SCOPED_TRACE(v1::ConsistencySpec::Model_Name(model));
      const v1::JobSpec spec =
          CountingSpec(2, model, model == v1::ConsistencySpec::SSP ? 1 : 0);
      const v1::Assignment assignment = servers.Assign(spec, 2);
      ParameterClientOptions options;
      options.push_timeout = absl::Milliseconds(100);
      const std::vector<std::vector<float>> initial = InitialParams(spec);
      std::vector<std::thread> threads;
      constexpr int kClocks = 20;
      for (int w = 0; w < 2; ++w) {
        threads.emplace_back([&, w] {
          auto client = ParameterClient::Create(ForWorker(assignment, w),
                                                *ModelTensors(spec.model()),
                                                options, nullptr);
          std::vector<std::vector<float>> params;
          for (int64_t clock = 0; clock < kClocks; ++clock) {
            ASSERT_TRUE((*client)->Pull(clock, &params).ok());
            ASSERT_TRUE((*client)->Push(clock, CountingGradient(spec, w)).ok());
          }
        });
      }
      for (auto& t : threads) t.join();
      auto client = ParameterClient::Create(ForWorker(assignment, 0),
                                            *ModelTensors(spec.model()),
                                            options, nullptr);
      std::vector<std::vector<float>> params;
      ASSERT_TRUE((*client)->Pull(kClocks, &params).ok());
      // BSP applies the average of the two workers' gradients: half each.
      const double per_push = model == v1::ConsistencySpec::BSP ? 0.5 : 1.0;
      for (int w = 0; w < 2; ++w) {
        EXPECT_NEAR(params[0][w * 2] - initial[0][w * 2], kClocks * per_push,
                    1e-4)
            << "worker " << w;
      }
    }
  }
  EXPECT_GT(dropped.load(), 0);
  EXPECT_GT(delayed.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Stores, ExactlyOnceTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "RocksDb" : "Memory";
                         });

// ---------------------------------------------------------------------------
// Bad input over the wire: each refusal is a specific status and changes
// nothing (the values witness it).

TEST(BadInputTest, RefusedPushesAndPullsChangeNothing) {
  ServerGroup servers(1, "");
  const v1::JobSpec spec = CountingSpec(2, v1::ConsistencySpec::SSP, 1);
  const v1::Assignment assignment = servers.Assign(spec, 2);
  auto stub = v1::ParameterService::NewStub(
      CreateChannel(assignment.shard_map().servers(0)));
  auto push = [&](const std::string& job, int worker, int64_t clock,
                  int64_t version) {
    v1::PushRequest request;
    request.set_job_id(job);
    request.set_worker_index(worker);
    request.set_clock(clock);
    request.set_map_version(version);
    v1::PushResponse response;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(5));
    return stub->Push(&ctx, request, &response);
  };
  const std::string job = assignment.job_id();
  const int64_t version = assignment.shard_map().version();
  struct Case {
    const char* what;
    grpc::Status status;
    grpc::StatusCode expected;
    const char* field;
  };
  const Case cases[] = {
      {"unknown job", push("job-unknown", 0, 0, version),
       grpc::StatusCode::NOT_FOUND, "job_id"},
      {"unknown worker", push(job, 7, 0, version),
       grpc::StatusCode::INVALID_ARGUMENT, "worker_index"},
      {"clock not reached", push(job, 0, 3, version),
       grpc::StatusCode::FAILED_PRECONDITION, "clock"},
      {"stale shard map", push(job, 0, 0, version + 1),
       grpc::StatusCode::FAILED_PRECONDITION, "map_version"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.error_code(), c.expected) << c.what;
    EXPECT_THAT(c.status.error_message(), ::testing::StartsWith(c.field))
        << c.what;
  }
  // Nothing was applied or recorded: the values are the initial ones and
  // worker 0's first push is for clock 0 still.
  ParameterClientOptions options;
  options.cache = false;
  auto client = ParameterClient::Create(
      ForWorker(assignment, 0), *ModelTensors(spec.model()), options, nullptr);
  std::vector<std::vector<float>> params;
  ASSERT_TRUE((*client)->Pull(0, &params).ok());
  EXPECT_EQ(params, InitialParams(spec));
  EXPECT_TRUE(push(job, 0, 0, version).ok());
}

}  // namespace
}  // namespace ps

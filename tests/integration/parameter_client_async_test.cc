// ParameterClient's asynchronous calls (PushAsync, PullAsync) over real gRPC
// to real parameter servers on loopback: each call reports exactly once,
// retries a server that is down until it comes back (the backoff timed by a
// gRPC alarm, no thread of the client's), and Cancel ends a call waiting in
// its backoff at once.
#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "gtest/gtest.h"
#include "tests/testing/server_group.h"
#include "tests/testing/tiny_assignment.h"
#include "worker/parameter_client.h"
#include "worker/step_pipeline.h"

namespace ps {
namespace {

// Records a call's outcomes: there must be exactly one.
class Outcomes {
 public:
  ParameterClient::Done Callback() {
    return [this](absl::Status status) {
      absl::MutexLock lock(&mu_);
      statuses_.push_back(std::move(status));
    };
  }
  // Waits up to `timeout` for the first outcome; false if none came.
  bool WaitFor(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<absl::Status>* s) { return !s->empty(); },
            &statuses_),
        timeout);
  }
  std::vector<absl::Status> statuses() {
    absl::MutexLock lock(&mu_);
    return statuses_;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Status> statuses_ ABSL_GUARDED_BY(mu_);
};

// Softmax regression 3 -> 2 in blocks of one value, over both servers; one
// worker, SGD.
class ParameterClientAsyncTest : public ::testing::Test {
 protected:
  ParameterClientAsyncTest() : servers_(2, "") {
    v1::JobSpec spec = testing::TinySpec(3, 2);
    spec.set_num_workers(1);
    spec.set_num_servers(2);
    spec.set_block_elems(1);
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(1.0f);
    spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
    assignment_ = servers_.Assign(spec, 1);
    tensors_ = *ModelTensors(assignment_.spec().model());
  }

  std::unique_ptr<ParameterClient> NewClient(ParameterClientOptions options) {
    auto client = ParameterClient::Create(assignment_, tensors_,
                                          std::move(options), nullptr);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  std::vector<std::vector<float>> Gradient(float value) const {
    std::vector<std::vector<float>> grads;
    for (const TensorSpec& t : tensors_) {
      grads.emplace_back(t.num_elems(), value);
    }
    return grads;
  }

  ServerGroup servers_;
  v1::Assignment assignment_;
  std::vector<TensorSpec> tensors_;
};

TEST_F(ParameterClientAsyncTest, PushAndPullReportOnceAndApplyOnce) {
  std::unique_ptr<ParameterClient> client = NewClient({});
  std::vector<std::vector<float>> before;
  ASSERT_TRUE(client->Pull(0, &before).ok());
  const auto grads = Gradient(1.0f);
  Outcomes pushed;
  client->PushAsync(0, &grads, pushed.Callback());
  ASSERT_TRUE(pushed.WaitFor(absl::Seconds(60)));
  Outcomes pulled;
  std::vector<std::vector<float>> after;
  client->PullAsync(1, &after, pulled.Callback());
  ASSERT_TRUE(pulled.WaitFor(absl::Seconds(60)));
  absl::SleepFor(absl::Milliseconds(100));  // A second report would show.
  ASSERT_EQ(pushed.statuses().size(), 1u);
  EXPECT_TRUE(pushed.statuses()[0].ok()) << pushed.statuses()[0];
  ASSERT_EQ(pulled.statuses().size(), 1u);
  EXPECT_TRUE(pulled.statuses()[0].ok()) << pulled.statuses()[0];
  // SGD, learning rate 1: every value moved by -1, once.
  for (size_t t = 0; t < after.size(); ++t) {
    for (size_t i = 0; i < after[t].size(); ++i) {
      EXPECT_FLOAT_EQ(after[t][i], before[t][i] - 1.0f) << t << " " << i;
    }
  }
  EXPECT_GT(client->pushed_bytes(), 0);
  EXPECT_GT(client->pulled_bytes(), 0);
}

TEST_F(ParameterClientAsyncTest, ABadRequestIsReportedOnceBeforeAnyCall) {
  std::unique_ptr<ParameterClient> client = NewClient({});
  const std::vector<std::vector<float>> wrong_shape(1);
  Outcomes refused;
  client->PushAsync(0, &wrong_shape, refused.Callback());
  // Reported inline, on this thread.
  ASSERT_EQ(refused.statuses().size(), 1u);
  EXPECT_EQ(refused.statuses()[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->pushed_bytes(), 0);
}

TEST_F(ParameterClientAsyncTest, RetriesAServerThatIsDownUntilItComesBack) {
  ParameterClientOptions options;
  options.retry_window = absl::Seconds(120);
  std::unique_ptr<ParameterClient> client = NewClient(options);
  servers_.Stop(1);
  const auto grads = Gradient(1.0f);
  Outcomes pushed;
  client->PushAsync(0, &grads, pushed.Callback());
  // Server 0 took its part; server 1's calls fail and back off.
  EXPECT_FALSE(pushed.WaitFor(absl::Milliseconds(500)));
  servers_.Restart(1);
  ASSERT_TRUE(pushed.WaitFor(absl::Seconds(60)));
  ASSERT_EQ(pushed.statuses().size(), 1u);
  EXPECT_TRUE(pushed.statuses()[0].ok()) << pushed.statuses()[0];
  // Both servers recorded the push: a read of clock 1 is served.
  std::vector<std::vector<float>> params;
  EXPECT_TRUE(client->Pull(1, &params).ok());
}

TEST_F(ParameterClientAsyncTest, CancelEndsACallInItsBackoffAtOnce) {
  ParameterClientOptions options;
  options.retry_window = absl::Seconds(120);
  std::unique_ptr<ParameterClient> client = NewClient(options);
  servers_.Stop(0);
  servers_.Stop(1);
  std::vector<std::vector<float>> params;
  Outcomes pulled;
  client->PullAsync(0, &params, pulled.Callback());
  // Long enough for several failed attempts: the call is in a backoff or an
  // attempt (either ends the same way).
  EXPECT_FALSE(pulled.WaitFor(absl::Milliseconds(300)));
  client->Cancel();
  // Ended by the cancellation, far inside the 120 s retry window.
  ASSERT_TRUE(pulled.WaitFor(absl::Seconds(30)));
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_EQ(pulled.statuses().size(), 1u);
  EXPECT_EQ(pulled.statuses()[0].code(), absl::StatusCode::kCancelled)
      << pulled.statuses()[0];
  // Every later call is refused at once, inline.
  const auto grads = Gradient(1.0f);
  Outcomes refused;
  client->PushAsync(0, &grads, refused.Callback());
  ASSERT_EQ(refused.statuses().size(), 1u);
  EXPECT_EQ(refused.statuses()[0].code(), absl::StatusCode::kCancelled);
}

TEST_F(ParameterClientAsyncTest, GivesUpOnceTheRetryWindowCloses) {
  ParameterClientOptions options;
  options.retry_window = absl::Milliseconds(300);
  std::unique_ptr<ParameterClient> client = NewClient(options);
  servers_.Stop(1);
  std::vector<std::vector<float>> params;
  const absl::Status status = client->Pull(0, &params);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("failed after retrying"),
            absl::string_view::npos)
      << status;
}

// The trainer's pipeline on the asynchronous calls: a push in flight and a
// pull made ahead of it, both waited for from this thread.
TEST_F(ParameterClientAsyncTest, PusherAndPullerOverlap) {
  std::unique_ptr<ParameterClient> client = NewClient({});
  AsyncPusher pusher(client.get());
  AsyncPuller puller(client.get());
  std::vector<std::vector<float>> params;
  const auto grads = Gradient(0.5f);
  for (int64_t clock = 0; clock < 10; ++clock) {
    pusher.Start(clock, &grads);
    // BSP, one worker: the read of clock + 1 waits for this push.
    puller.Start(clock + 1, &params);
    const AsyncPuller::Result read = puller.Wait();
    EXPECT_EQ(read.clock, clock + 1);
    ASSERT_TRUE(read.status.ok()) << read.status;
    const AsyncPusher::Result push = pusher.Wait();
    EXPECT_EQ(push.clock, clock);
    ASSERT_TRUE(push.status.ok()) << push.status;
  }
  EXPECT_FALSE(pusher.busy());
  EXPECT_FALSE(puller.busy());
}

}  // namespace
}  // namespace ps

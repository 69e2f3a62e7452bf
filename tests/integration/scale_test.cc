// Server moves (psctl scale; docs/consistency.md, "Server moves"): a whole
// cluster in one process (a coordinator, three parameter servers with
// RocksDB in temporary directories, two workers; real gRPC on loopback).
// A BSP job moves from 2 servers to 3 and back to 2 while it trains, and
// its trained parameters equal those of the same job run without moves,
// bit for bit; ScaleJob's refusals name their reason.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/job_client.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/fashion_mnist.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

v1::JobSpec BspJob(int64_t samples) {
  v1::JobSpec spec = testing::FashionMnistMlpJob("scale", 32, samples, 500);
  spec.set_epochs(2);
  spec.set_batch_size(8);
  spec.set_seed(11);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  // Several blocks per tensor, so that every server holds some.
  spec.set_block_elems(4096);
  return spec;
}

class ScaleTest : public testing::ClusterFixture {
 protected:
  void SetUp() override {
    if (!testing::HaveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST";
    ASSERT_NO_FATAL_FAILURE(StartCoordinator("scale"));
    ASSERT_NO_FATAL_FAILURE(StartServers(3));
    ASSERT_NO_FATAL_FAILURE(StartWorkers(2));
  }
};

TEST_F(ScaleTest, BspMovesTwoToThreeToTwoAndEqualsTheUndisturbedRun) {
  const v1::JobSpec spec = BspJob(4000);
  // The undisturbed run.
  auto first = client_->Submit(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  v1::JobStatus undisturbed = WaitEnd(*first);
  ASSERT_EQ(undisturbed.state(), v1::SUCCEEDED) << undisturbed.message();
  auto expected = client_->ExportModel(*first);
  ASSERT_TRUE(expected.ok()) << expected.status();

  // The same job, moved twice while it trains.
  auto second = client_->Submit(spec);
  ASSERT_TRUE(second.ok()) << second.status();
  const int64_t total = undisturbed.progress().total_clocks();
  v1::JobStatus status = WaitFor(*second, [](const v1::JobStatus& s) {
    return s.state() == v1::RUNNING && s.progress().clock() >= 20;
  });
  ASSERT_EQ(status.state(), v1::RUNNING) << status.message();
  auto up = client_->Scale(*second, 3);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->map_change().version(), 2);
  EXPECT_EQ(up->map_change().shard_map().servers_size(), 3);
  status = WaitFor(*second, [](const v1::JobStatus& s) {
    return s.map_moves_size() >= 1 || s.map_change().version() == 0;
  });
  ASSERT_EQ(status.map_moves_size(), 1) << status.message();
  EXPECT_EQ(status.shard_map().version(), 2);
  EXPECT_EQ(status.shard_map().servers_size(), 3);
  EXPECT_GT(status.map_moves(0).units_moved(), 0);
  EXPECT_LT(status.map_moves(0).clock(), total);

  auto down = client_->Scale(*second, 2);
  ASSERT_TRUE(down.ok()) << down.status();
  status = WaitFor(*second, [](const v1::JobStatus& s) {
    return s.map_moves_size() >= 2 || s.map_change().version() == 0;
  });
  ASSERT_EQ(status.map_moves_size(), 2) << status.message();
  EXPECT_EQ(status.shard_map().version(), 3);
  EXPECT_EQ(status.shard_map().servers_size(), 2);
  EXPECT_LT(status.map_moves(1).clock(), total);

  v1::JobStatus moved = WaitEnd(*second);
  ASSERT_EQ(moved.state(), v1::SUCCEEDED) << moved.message();
  EXPECT_EQ(moved.progress().clock(), total);
  auto got = client_->ExportModel(*second);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->tensors_size(), expected->tensors_size());
  for (int t = 0; t < got->tensors_size(); ++t) {
    // Bit for bit: the same bytes.
    EXPECT_TRUE(got->tensors(t).data() == expected->tensors(t).data())
        << "tensor " << got->tensors(t).name() << " differs";
  }
  EXPECT_EQ(got->test_accuracy(), expected->test_accuracy());
}

TEST_F(ScaleTest, RefusalsNameTheirReason) {
  auto unknown = client_->Scale("job-404", 3);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("no job"));

  // A long job, cancelled at the end.
  auto id = client_->Submit(BspJob(60000));
  ASSERT_TRUE(id.ok()) << id.status();
  v1::JobStatus status = WaitFor(
      *id, [](const v1::JobStatus& s) { return s.state() == v1::RUNNING; });
  ASSERT_EQ(status.state(), v1::RUNNING) << status.message();

  auto zero = client_->Scale(*id, 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("num_servers: must be >= 1"));

  // Three servers registered, two in the job: one is free.
  auto many = client_->Scale(*id, 5);
  EXPECT_EQ(many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(many.status().message(), HasSubstr("needs 3 more"));
  EXPECT_THAT(many.status().message(), HasSubstr("1 is free"));

  auto units = client_->Scale(*id, 100000);
  EXPECT_EQ(units.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(units.status().message(), HasSubstr("placement units"));

  auto same = client_->Scale(*id, 2);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->map_change().version(), 0);  // Nothing to do.

  ASSERT_TRUE(client_->Cancel(*id).ok());
  auto ended = client_->Scale(*id, 3);
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ended.status().message(), HasSubstr("only a RUNNING job"));
}

}  // namespace
}  // namespace ps

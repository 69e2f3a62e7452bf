// Ended jobs leave nothing on the servers' disks: a whole cluster in one
// process (coordinator, a RocksDB parameter server, a worker; real gRPC on
// loopback) runs a short job; once it has SUCCEEDED the server deletes the
// job's shards, and after a clean stop its data directory holds neither table
// files nor write-ahead log of the job. Also DeleteJob and ListJobs paging
// through the client.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/job_client.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/parameter_server.h"
#include "server/rocksdb_shard_store.h"
#include "tests/testing/fashion_mnist.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::HaveFashionMnist;
using ::testing::IsEmpty;

// Bytes of a RocksDB directory's table files and write-ahead logs.
uint64_t DataBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".sst" || ext == ".log")) {
      total += entry.file_size();
    }
  }
  return total;
}

class RetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST not installed";

    CoordinatorOptions coordinator;
    coordinator.data_dir = dir_.File("coordinator");
    coordinator.timing.heartbeat_interval = absl::Milliseconds(50);
    coordinator_ = std::make_unique<Coordinator>(coordinator);
    ASSERT_TRUE(coordinator_->Start().ok());
    const std::string address =
        absl::StrCat("127.0.0.1:", coordinator_->port());

    ParameterServerOptions server;
    server.coordinator = address;
    server.data_dir = dir_.File("server0");
    server_ = std::make_unique<ParameterServer>(server);
    ASSERT_TRUE(server_->Start().ok());

    WorkerNodeOptions worker;
    worker.coordinator = address;
    CpuBackendOptions backend;
    backend.num_threads = 1;
    worker_ = std::make_unique<WorkerNode>(worker, CpuBackend::Create(backend));
    ASSERT_TRUE(worker_->Start().ok());
    client_ = std::make_unique<JobClient>(JobClientOptions{address});
  }

  void TearDown() override {
    if (worker_) worker_->Stop();
    if (server_) server_->Stop();
    if (coordinator_) coordinator_->Stop();
  }

  // Submits a short job and waits for it to end.
  v1::JobStatus RunShortJob() {
    v1::JobSpec spec = testing::FashionMnistMlpJob("retention", 64, 2000, 500);
    spec.set_block_elems(16384);
    auto id = client_->Submit(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    auto status = client_->Watch(*id, [](const v1::JobStatus&) {});
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? *status : v1::JobStatus();
  }

  // Waits until the server stores no job; returns whether it did in time.
  bool WaitForEmptyStore() {
    for (int i = 0; i < 600; ++i) {
      auto stored = server_->store()->ListJobs();
      if (stored.ok() && stored->empty()) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  testing::ScopedTempDir dir_{"ps-retention"};
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<ParameterServer> server_;
  std::unique_ptr<WorkerNode> worker_;
  std::unique_ptr<JobClient> client_;
};

TEST_F(RetentionTest, AnEndedJobsShardsAreDeletedFromTheServersDisk) {
  const v1::JobStatus job = RunShortJob();
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.message();
  // The model is safe with the coordinator before the shards go.
  ASSERT_TRUE(client_->ExportModel(job.job_id()).ok());

  EXPECT_TRUE(WaitForEmptyStore())
      << "the server still stores the ended job " << job.job_id();
  server_->Stop();
  const std::string data_dir = dir_.File("server0");
  const uint64_t bytes = DataBytes(data_dir);
  RecordProperty("server_data_bytes_after_exit", absl::StrCat(bytes));
  // The job's state alone is 600 KiB (values and Adam's two slots), and 30+
  // MiB went through the log: none of it is left.
  EXPECT_LT(bytes, uint64_t{64} << 10);

  auto store = RocksDbShardStore::Open({.path = data_dir});
  ASSERT_TRUE(store.ok()) << store.status();
  auto stored = (*store)->ListJobs();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(*stored, IsEmpty());
  // The model is still exported: the coordinator keeps it.
  EXPECT_TRUE(client_->ExportModel(job.job_id()).ok());
}

TEST_F(RetentionTest, DeleteJobAndListPages) {
  const v1::JobStatus done = RunShortJob();
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.message();
  // A job needing more servers than there are stays PENDING.
  v1::JobSpec big = testing::FashionMnistMlpJob("waits", 64, 2000, 500);
  big.set_num_servers(3);
  auto pending = client_->Submit(big);
  ASSERT_TRUE(pending.ok()) << pending.status();

  auto refused = client_->Delete(*pending);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(client_->Delete("job-999999").code(), absl::StatusCode::kNotFound);

  // One job per page: two pages, then none.
  auto first = client_->ListPage(1, "");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->jobs_size(), 1);
  EXPECT_EQ(first->jobs(0).job_id(), done.job_id());
  auto second = client_->ListPage(1, first->next_page_token());
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->jobs_size(), 1);
  EXPECT_EQ(second->jobs(0).job_id(), *pending);
  EXPECT_THAT(second->next_page_token(), IsEmpty());
  EXPECT_EQ(client_->ListPage(-1, "").status().code(),
            absl::StatusCode::kInvalidArgument);

  // List follows the pages.
  auto both = client_->List(/*page_size=*/1);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_EQ((*both)[1].job_id(), *pending);

  ASSERT_TRUE(client_->Delete(done.job_id()).ok());
  EXPECT_EQ(client_->Get(done.job_id()).status().code(),
            absl::StatusCode::kNotFound);
  auto model = client_->ExportModel(done.job_id());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  auto all = client_->List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].job_id(), *pending);
  ASSERT_TRUE(client_->Cancel(*pending).ok());
  EXPECT_TRUE(client_->Delete(*pending).ok());
  EXPECT_TRUE(WaitForEmptyStore());
}

}  // namespace
}  // namespace ps

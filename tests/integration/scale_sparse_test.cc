// Server moves of a job with sparse tables (psctl scale; docs/consistency.md,
// "Server moves"; docs/sparse.md, "Moving buckets"): a whole cluster in one
// process (a coordinator, three parameter servers with RocksDB in temporary
// directories, two C++ workers; real gRPC on loopback). A BSP CTR job (26
// sparse tables with admission counts and idle eviction, and a dense MLP)
// moves from 2 servers to 3 and back to 2 while it trains: its buckets move
// with their rows, optimizer state, last-updated clocks and pending
// admission counts, and the workers route rows by the new map. The trained
// dense tensors and every row of every table (exported as `psctl export`
// does) equal those of the same job run without moves, bit for bit; once
// with every row in memory, once with the servers' memory tier holding most
// rows on disk. An elastic job is still refused, naming why.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/job_client.h"
#include "client/table_export.h"
#include "common/model_file.h"
#include "common/model_tables.h"
#include "common/sparse_keys.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "server/parameter_server.h"
#include "tests/testing/ctr_training.h"
#include "tests/testing/fashion_mnist.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kTrainRows = 4096, kTestRows = 256, kBatch = 32;

class ScaleSparseTest : public ::testing::TestWithParam<bool> {
 protected:
  // GetParam(): the servers keep at most 4 KiB of rows in memory (a few rows
  // of each table; the job's tables hold about 16 KiB), the rest in their
  // memory tier (RocksDB).
  void SetUp() override {
    char pattern[] = "/tmp/ps-scale-sparse-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    testing::WriteLines(Path("train.tsv"),
                        testing::SyntheticCriteoLines(kTrainRows, 5));
    testing::WriteLines(Path("test.tsv"),
                        testing::SyntheticCriteoLines(kTestRows, 6));
    CoordinatorOptions coordinator;
    coordinator.data_dir = Path("coordinator");
    coordinator.timing.heartbeat_interval = absl::Milliseconds(50);
    coordinator.timing.lease = absl::Seconds(5);
    coordinator_ = std::make_unique<Coordinator>(coordinator);
    ASSERT_TRUE(coordinator_->Start().ok());
    address_ = absl::StrCat("127.0.0.1:", coordinator_->port());
    for (int i = 0; i < 3; ++i) {
      ParameterServerOptions server;
      server.coordinator = address_;
      server.data_dir = Path(absl::StrCat("server", i));
      if (GetParam()) server.job_options.sparse_memory_bytes = 4 << 10;
      servers_.push_back(std::make_unique<ParameterServer>(server));
      ASSERT_TRUE(servers_.back()->Start().ok());
    }
    for (int i = 0; i < 2; ++i) {
      WorkerNodeOptions worker;
      worker.coordinator = address_;
      workers_.push_back(std::make_unique<WorkerNode>(
          worker, CpuBackend::Create({.num_threads = 1})));
      ASSERT_TRUE(workers_.back()->Start().ok());
    }
    client_ = std::make_unique<JobClient>(JobClientOptions{address_});
  }

  void TearDown() override {
    for (auto& w : workers_) w->Stop();
    for (auto& s : servers_) s->Stop();
    if (coordinator_) coordinator_->Stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

  // A BSP CTR job of 5 epochs (320 clocks, long enough for both moves): ids
  // admitted at their second clock, rows idle for 40 clocks evicted.
  v1::JobSpec Job() const {
    v1::JobSpec spec = testing::CtrJob({.train_file = Path("train.tsv"),
                                        .test_file = Path("test.tsv"),
                                        .batch_size = kBatch,
                                        .epochs = 5});
    for (auto& table : *spec.mutable_model()->mutable_sparse_tables()) {
      table.mutable_admission()->set_min_count(2);
      table.mutable_eviction()->set_max_idle_clocks(40);
    }
    return spec;
  }

  // Polls the job until `done` holds for its status (or it ended, or 120 s
  // passed); returns the last status.
  v1::JobStatus WaitFor(const std::string& id,
                        const std::function<bool(const v1::JobStatus&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    v1::JobStatus status;
    while (absl::Now() < deadline) {
      auto got = client_->Get(id);
      if (got.ok()) {
        status = *got;
        if (done(status) || status.state() == v1::SUCCEEDED ||
            status.state() == v1::FAILED || status.state() == v1::CANCELLED) {
          return status;
        }
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return status;
  }

  v1::JobStatus WaitEnd(const std::string& id) {
    return WaitFor(id, [](const v1::JobStatus&) { return false; });
  }

  // The ended job's dense tensors and every row of its tables, as `psctl
  // export` writes them (read from the servers of its final map).
  struct Exported {
    v1::TrainedModel dense;
    std::vector<ModelTableRows> tables;
  };
  Exported Export(const v1::JobStatus& status, const std::string& name) {
    Exported out;
    auto model = client_->ExportModel(status.job_id());
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return out;
    out.dense = *model;
    auto rows = ExportModelWithTables(*model, status.shard_map(), Path(name),
                                      TableExportOptions{});
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return out;
    EXPECT_GT(*rows, 0);
    auto tables = ReadAllModelTables(Path(name));
    EXPECT_TRUE(tables.ok()) << tables.status();
    if (tables.ok()) out.tables = *std::move(tables);
    return out;
  }

  // Rows the servers read from their memory tier so far (every table's
  // ps_sparse_tier_disk_reads_total, summed; 0 without a tier).
  double TierDiskReads() const {
    double sum = 0;
    for (const auto& server : servers_) {
      const std::string body = prometheus::TextSerializer().Serialize(
          server->registry().Collect());
      for (absl::string_view line : absl::StrSplit(body, '\n')) {
        if (!absl::StartsWith(line, "ps_sparse_tier_disk_reads_total{")) {
          continue;
        }
        double value = 0;
        if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) {
          sum += value;
        }
      }
    }
    return sum;
  }

  std::string dir_;
  std::string address_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::unique_ptr<WorkerNode>> workers_;
  std::unique_ptr<JobClient> client_;
};

// Per table, (id, row bytes) sorted by id.
using SortedRows = std::vector<std::vector<std::pair<uint64_t, std::string>>>;
SortedRows Sorted(const std::vector<ModelTableRows>& tables) {
  SortedRows out(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    const size_t n = tables[t].ids.size();
    const size_t dim = n == 0 ? 0 : tables[t].values.size() / n;
    for (size_t i = 0; i < n; ++i) {
      out[t].emplace_back(
          tables[t].ids[i],
          std::string(reinterpret_cast<const char*>(&tables[t].values[i * dim]),
                      dim * sizeof(float)));
    }
    std::sort(out[t].begin(), out[t].end());
  }
  return out;
}

// The number of buckets of `map` on each server.
std::vector<int> BucketsPerServer(const v1::ShardMap& map) {
  std::vector<int> out(map.servers_size(), 0);
  for (const v1::BlockPlacement& b : map.blocks()) {
    if (IsBucketKey(b.key())) ++out[b.server()];
  }
  return out;
}

TEST_P(ScaleSparseTest, CtrJobMovesTwoToThreeToTwoAndEqualsTheUndisturbedRun) {
  const v1::JobSpec spec = Job();
  // The undisturbed run.
  auto first = client_->Submit(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  const v1::JobStatus undisturbed = WaitEnd(*first);
  ASSERT_EQ(undisturbed.state(), v1::SUCCEEDED) << undisturbed.message();
  const Exported expected = Export(undisturbed, "undisturbed.bin");

  // The same job, moved twice while it trains.
  const double disk_reads = TierDiskReads();
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
  status = WaitFor(*second, [](const v1::JobStatus& s) {
    return s.map_moves_size() >= 1 || s.map_change().version() == 0;
  });
  ASSERT_EQ(status.map_moves_size(), 1) << status.message();
  EXPECT_EQ(status.shard_map().servers_size(), 3);
  // The buckets spread over the three servers (by their expected load).
  for (int n : BucketsPerServer(status.shard_map())) EXPECT_GT(n, 0);
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

  const v1::JobStatus moved = WaitEnd(*second);
  ASSERT_EQ(moved.state(), v1::SUCCEEDED) << moved.message();
  // For the record (no timing is asserted): each move's units and the time
  // from ScaleJob to its commit.
  for (const v1::ShardMapMove& m : moved.map_moves()) {
    std::printf("move to version %lld: %d servers at clock %lld, %d units, "
                "%lld ms from request to commit\n",
                static_cast<long long>(m.version()), m.num_servers(),
                static_cast<long long>(m.clock()), m.units_moved(),
                static_cast<long long>(m.committed_time_ms() -
                                       m.requested_time_ms()));
  }
  EXPECT_EQ(moved.progress().clock(), total);
  // Tiered: rows were on disk while the job moved.
  if (GetParam()) {
    EXPECT_GT(TierDiskReads(), disk_reads);
  }
  const Exported got = Export(moved, "moved.bin");
  ASSERT_EQ(got.dense.tensors_size(), expected.dense.tensors_size());
  for (int t = 0; t < got.dense.tensors_size(); ++t) {
    EXPECT_TRUE(got.dense.tensors(t).data() == expected.dense.tensors(t).data())
        << "tensor " << got.dense.tensors(t).name() << " differs";
  }
  ASSERT_EQ(got.tables.size(), expected.tables.size());
  const SortedRows got_rows = Sorted(got.tables);
  const SortedRows expected_rows = Sorted(expected.tables);
  for (size_t t = 0; t < got_rows.size(); ++t) {
    EXPECT_EQ(got_rows[t].size(), expected_rows[t].size()) << "table " << t;
    EXPECT_TRUE(got_rows[t] == expected_rows[t]) << "table " << t << " differs";
  }
  EXPECT_EQ(got.dense.test_accuracy(), expected.dense.test_accuracy());
}

INSTANTIATE_TEST_SUITE_P(Memory, ScaleSparseTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tiered" : "InMemory";
                         });

// Still refused (docs/operations.md, "Scaling a job's servers"): an elastic
// job (min_workers < max_workers), naming why.
TEST(ScaleSparseRefusalTest, AnElasticJobIsRefused) {
  if (!testing::HaveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST";
  char pattern[] = "/tmp/ps-scale-refuse-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  CoordinatorOptions options;
  options.data_dir = dir + "/coordinator";
  options.timing.heartbeat_interval = absl::Milliseconds(50);
  Coordinator coordinator(options);
  ASSERT_TRUE(coordinator.Start().ok());
  const std::string address = absl::StrCat("127.0.0.1:", coordinator.port());
  std::vector<std::unique_ptr<ParameterServer>> servers;
  for (int i = 0; i < 2; ++i) {
    ParameterServerOptions server;
    server.coordinator = address;
    server.data_dir = absl::StrCat(dir, "/server", i);
    servers.push_back(std::make_unique<ParameterServer>(server));
    ASSERT_TRUE(servers.back()->Start().ok());
  }
  WorkerNodeOptions worker_options;
  worker_options.coordinator = address;
  WorkerNode worker(worker_options, CpuBackend::Create({.num_threads = 1}));
  ASSERT_TRUE(worker.Start().ok());
  JobClient client(JobClientOptions{address});

  v1::JobSpec spec = testing::FashionMnistMlpJob("elastic", 32, 60000, 500);
  spec.set_num_workers(1);
  spec.set_min_workers(1);
  spec.set_max_workers(2);
  spec.set_num_servers(1);
  auto id = client.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  v1::JobStatus status;
  while (absl::Now() < deadline && status.state() != v1::RUNNING) {
    auto got = client.Get(*id);
    if (got.ok()) status = *got;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(status.state(), v1::RUNNING) << status.message();
  auto elastic = client.Scale(*id, 2);
  EXPECT_EQ(elastic.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(elastic.status().message(), HasSubstr("is elastic"));
  ASSERT_TRUE(client.Cancel(*id).ok());

  worker.Stop();
  for (auto& s : servers) s->Stop();
  coordinator.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ps

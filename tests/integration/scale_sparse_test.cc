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
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/ctr_training.h"
#include "tests/testing/fashion_mnist.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/worker_node.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kTrainRows = 4096, kTestRows = 256, kBatch = 32;
// How long the test waits for a job to get somewhere (320 clocks, 2 moves).
constexpr absl::Duration kWait = absl::Seconds(120);

class ScaleSparseTest : public testing::ClusterFixture,
                        public ::testing::WithParamInterface<bool> {
 protected:
  // GetParam(): the servers keep at most 4 KiB of rows in memory (a few rows
  // of each table; the job's tables hold about 16 KiB), the rest in their
  // memory tier (RocksDB).
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartCoordinator("scale-sparse"));
    testing::WriteLines(Path("train.tsv"),
                        testing::SyntheticCriteoLines(kTrainRows, 5));
    testing::WriteLines(Path("test.tsv"),
                        testing::SyntheticCriteoLines(kTestRows, 6));
    ParameterServerOptions server;
    if (GetParam()) server.job_options.sparse_memory_bytes = 4 << 10;
    ASSERT_NO_FATAL_FAILURE(StartServers(3, server));
    ASSERT_NO_FATAL_FAILURE(StartWorkers(2));
  }

  std::string Path(const std::string& name) const { return dir_->File(name); }

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
      const std::string body =
          prometheus::TextSerializer().Serialize(server->registry().Collect());
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
  const v1::JobStatus undisturbed = WaitEnd(*first, kWait);
  ASSERT_EQ(undisturbed.state(), v1::SUCCEEDED) << undisturbed.message();
  const Exported expected = Export(undisturbed, "undisturbed.bin");

  // The same job, moved twice while it trains.
  const double disk_reads = TierDiskReads();
  auto second = client_->Submit(spec);
  ASSERT_TRUE(second.ok()) << second.status();
  const int64_t total = undisturbed.progress().total_clocks();
  v1::JobStatus status = WaitFor(
      *second,
      [](const v1::JobStatus& s) {
        return s.state() == v1::RUNNING && s.progress().clock() >= 20;
      },
      kWait);
  ASSERT_EQ(status.state(), v1::RUNNING) << status.message();
  auto up = client_->Scale(*second, 3);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->map_change().version(), 2);
  status = WaitFor(
      *second,
      [](const v1::JobStatus& s) {
        return s.map_moves_size() >= 1 || s.map_change().version() == 0;
      },
      kWait);
  ASSERT_EQ(status.map_moves_size(), 1) << status.message();
  EXPECT_EQ(status.shard_map().servers_size(), 3);
  // The buckets spread over the three servers (by their expected load).
  for (int n : BucketsPerServer(status.shard_map())) EXPECT_GT(n, 0);
  EXPECT_LT(status.map_moves(0).clock(), total);

  auto down = client_->Scale(*second, 2);
  ASSERT_TRUE(down.ok()) << down.status();
  status = WaitFor(
      *second,
      [](const v1::JobStatus& s) {
        return s.map_moves_size() >= 2 || s.map_change().version() == 0;
      },
      kWait);
  ASSERT_EQ(status.map_moves_size(), 2) << status.message();
  EXPECT_EQ(status.shard_map().version(), 3);
  EXPECT_EQ(status.shard_map().servers_size(), 2);
  EXPECT_LT(status.map_moves(1).clock(), total);

  const v1::JobStatus moved = WaitEnd(*second, kWait);
  ASSERT_EQ(moved.state(), v1::SUCCEEDED) << moved.message();
  // For the record (no timing is asserted): each move's units and the time
  // from ScaleJob to its commit.
  for (const v1::ShardMapMove& m : moved.map_moves()) {
    std::printf(
        "move to version %lld: %d servers at clock %lld, %d units, "
        "%lld ms from request to commit\n",
        static_cast<long long>(m.version()), m.num_servers(),
        static_cast<long long>(m.clock()), m.units_moved(),
        static_cast<long long>(m.committed_time_ms() - m.requested_time_ms()));
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

INSTANTIATE_TEST_SUITE_P(Memory, ScaleSparseTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tiered" : "InMemory";
                         });

// Still refused (docs/operations.md, "Scaling a job's servers"): an elastic
// job (min_workers < max_workers), naming why.
using ScaleSparseRefusalTest = testing::ClusterFixture;

TEST_F(ScaleSparseRefusalTest, AnElasticJobIsRefused) {
  if (!testing::HaveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST";
  ASSERT_NO_FATAL_FAILURE(StartCoordinator("scale-refuse"));
  ASSERT_NO_FATAL_FAILURE(StartServers(2));
  ASSERT_NO_FATAL_FAILURE(StartWorkers(1));

  v1::JobSpec spec = testing::FashionMnistMlpJob("elastic", 32, 60000, 500);
  spec.set_num_workers(1);
  spec.set_min_workers(1);
  spec.set_max_workers(2);
  spec.set_num_servers(1);
  auto id = client_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const v1::JobStatus status = WaitFor(
      *id, [](const v1::JobStatus& s) { return s.state() == v1::RUNNING; });
  ASSERT_EQ(status.state(), v1::RUNNING) << status.message();
  auto elastic = client_->Scale(*id, 2);
  EXPECT_EQ(elastic.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(elastic.status().message(), HasSubstr("is elastic"));
  ASSERT_TRUE(client_->Cancel(*id).ok());
}

}  // namespace
}  // namespace ps

// A sparse job whose snapshots keep their rows in files of their own
// (server/snapshot_rows_files.h; docs/durability.md), killed mid-run: a real
// process (a gtest death test) runs the job on a RocksDbShardStore that
// writes every snapshot's rows to a file, and ends with _exit (like kill -9:
// no closing snapshot, no destructor). The reopened job must serve, bit for
// bit, the rows of a twin that never snapshotted, and go on agreeing with it.
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/sparse_keys.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/rocksdb_shard_store.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr char kDirVariable[] = "PS_SERVER_JOB_ROWS_FILES_TEST_DIR";
constexpr char kJobId[] = "job-000001";
constexpr int kDim = 4;
constexpr int kBuckets = 8;
constexpr int kClocks = 6;
constexpr int kCrashed = 43;

using Rows = std::vector<float>;

std::string DataDir() {
  if (const char* dir = std::getenv(kDirVariable); dir != nullptr) return dir;
  std::string pattern =
      (fs::temp_directory_path() / "ps_job_rows_files_XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) return "";
  ::setenv(kDirVariable, pattern.c_str(), 1);
  return pattern;
}

// BSP, two workers, one table with row-wise Adagrad and admission after 2
// updates (so that pending counts are part of the state), its buckets
// alternating between two servers; this is server 0.
v1::Assignment MakeAssignment() {
  v1::Assignment a;
  a.set_job_id(kJobId);
  v1::JobSpec* spec = a.mutable_spec();
  *spec = testing::TinySparseSpec("sparse", kDim, kBuckets);
  v1::SparseTableSpec* table = spec->mutable_model()->mutable_sparse_tables(0);
  table->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(
      0.1f);
  table->mutable_admission()->set_min_count(2);
  spec->set_seed(11);
  spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.5f);
  spec->mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec->set_num_workers(2);
  spec->set_num_servers(2);
  ApplyJobSpecDefaults(spec);
  a.set_index(0);
  a.set_num_workers(2);
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(1);
  map->add_servers("localhost:0");
  map->add_servers("localhost:1");
  testing::PlaceTinySparseJob(
      *spec, kBuckets, [](uint32_t b) { return static_cast<int>(b % 2); }, map);
  return a;
}

// The first `n` ids whose bucket is on server 0.
std::vector<uint64_t> Ids(int n) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; static_cast<int>(ids.size()) < n; ++id) {
    if (BucketOfId(id, 0, kBuckets) % 2 == 0) ids.push_back(id);
  }
  return ids;
}

// Worker `worker`'s push of `clock`: an overlapping window of the ids (some
// reach the admission count, some not), gradients a function of both.
v1::PushRequest MakePush(int worker, int64_t clock) {
  const std::vector<uint64_t> all = Ids(12);
  const size_t from = static_cast<size_t>(int64_t{worker} * 2 + clock % 4);
  const std::vector<uint64_t> ids(all.begin() + from, all.begin() + from + 6);
  Rows grads(ids.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] =
        0.25f * std::sin(static_cast<float>(clock * 31 + int64_t{worker} * 7 +
                                            static_cast<int64_t>(i)));
  }
  v1::PushRequest push;
  push.set_job_id(kJobId);
  push.set_worker_index(worker);
  push.set_clock(clock);
  push.set_map_version(1);
  v1::SparseRows* rows = push.add_sparse();
  rows->set_table(0);
  rows->set_keys(std::string(reinterpret_cast<const char*>(ids.data()),
                             ids.size() * sizeof(uint64_t)));
  rows->set_values(std::string(reinterpret_cast<const char*>(grads.data()),
                               grads.size() * sizeof(float)));
  return push;
}

// Pushes both workers' clocks [from, to), each answered (durable).
bool PushClocks(ServerJob& job, int64_t from, int64_t to) {
  for (int64_t clock = from; clock < to; ++clock) {
    std::vector<absl::Status> answers;
    for (int worker = 0; worker < 2; ++worker) {
      job.Push(MakePush(worker, clock),
               [&answers](const absl::StatusOr<v1::PushResponse>& reply) {
                 answers.push_back(reply.status());
               });
    }
    if (!job.Flush().ok() || answers.size() != 2) return false;
    for (const absl::Status& s : answers) {
      if (!s.ok()) return false;
    }
  }
  return true;
}

// Every row of Ids(12) at `clock`, as served.
Rows RowsNow(ServerJob& job, int64_t clock) {
  const std::vector<uint64_t> ids = Ids(12);
  v1::PullRequest request;
  request.set_job_id(kJobId);
  request.set_clock(clock);
  request.set_map_version(1);
  request.add_sparse()->set_keys(
      std::string(reinterpret_cast<const char*>(ids.data()),
                  ids.size() * sizeof(uint64_t)));
  Rows rows;
  job.Pull(request, [&rows](absl::StatusOr<v1::PullResponse> reply) {
    if (!reply.ok() || reply->sparse_size() != 1) return;
    const std::string& values = reply->sparse(0).values();
    rows.resize(values.size() / sizeof(float));
    std::memcpy(rows.data(), values.data(), values.size());
  });
  return rows;
}

class ServerJobRowsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    dir_ = DataDir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    fs::remove_all(dir_);
    ::unsetenv(kDirVariable);
  }
  std::string dir_;
};

// Snapshots as often as the job takes them (every record, or as many log
// bytes as the last snapshot's rows), so that the crash leaves a snapshot
// whose rows are in a file and records after it. `budget`: the job's sparse
// memory budget (0: none; else most rows in the tier, their snapshots
// encoded off the job's lock, docs/durability.md).
void KillAndReopen(const std::string& dir, int64_t budget) {
  const std::string path = dir + "/data";
  const ServerJobOptions options = {.snapshot_log_bytes = 1,
                                    .sparse_memory_bytes = budget};
  EXPECT_EXIT(
      {
        prometheus::Registry registry;
        ServerMetrics metrics(registry);
        auto store =
            RocksDbShardStore::Open({.path = path, .rows_file_bytes = 0});
        if (!store.ok()) _exit(1);
        auto job =
            ServerJob::Open(MakeAssignment(), store->get(), &metrics, options);
        if (!job.ok() || !PushClocks(**job, 0, kClocks)) _exit(1);
        _exit(kCrashed);  // No Close: no closing snapshot.
      },
      ::testing::ExitedWithCode(kCrashed), "");
  EXPECT_GE(std::distance(fs::directory_iterator(path + "/snapshot-rows"),
                          fs::directory_iterator()),
            1);

  prometheus::Registry registry;
  ServerMetrics metrics(registry);
  // The twin never snapshots: its rows never went through a file.
  std::unique_ptr<ShardStore> twin_store = MemoryShardStore::Create();
  auto twin = ServerJob::Open(MakeAssignment(), twin_store.get(), &metrics,
                              {.snapshot_log_bytes = int64_t{1} << 40});
  ASSERT_TRUE(twin.ok()) << twin.status();
  ASSERT_TRUE(PushClocks(**twin, 0, kClocks));
  auto store = RocksDbShardStore::Open({.path = path, .rows_file_bytes = 0});
  ASSERT_TRUE(store.ok()) << store.status();
  auto reopened =
      ServerJob::Open(MakeAssignment(), store->get(), &metrics, options);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->min_clock(), kClocks);
  const Rows expected = RowsNow(**twin, kClocks);
  const Rows restored = RowsNow(**reopened, kClocks);
  ASSERT_EQ(restored.size(), expected.size());
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(std::memcmp(restored.data(), expected.data(),
                        expected.size() * sizeof(float)),
            0);
  // Optimizer state and admission counts came back too: further clocks
  // agree bit for bit.
  ASSERT_TRUE(PushClocks(**reopened, kClocks, kClocks + 3));
  ASSERT_TRUE(PushClocks(**twin, kClocks, kClocks + 3));
  const Rows later = RowsNow(**reopened, kClocks + 3);
  const Rows twin_later = RowsNow(**twin, kClocks + 3);
  ASSERT_EQ(later.size(), twin_later.size());
  EXPECT_EQ(std::memcmp(later.data(), twin_later.data(),
                        later.size() * sizeof(float)),
            0);
}

TEST_F(ServerJobRowsFilesTest, AKilledJobComesBackBitForBitFromItsRowsFiles) {
  KillAndReopen(dir_, 0);
}

TEST_F(ServerJobRowsFilesTest, AKilledTieredJobComesBackBitForBit) {
  KillAndReopen(dir_, 700);  // Two or three rows in memory.
}

// The same pushes to a job whose rows are nearly all in its tier and to one
// without a budget, each snapshotting at every record into its rows files:
// both stores hold the same bytes (snapshot blocks, rows, clocks, the log
// after the snapshot), before and after the jobs close.
TEST_F(ServerJobRowsFilesTest, ATieredJobStoresTheSameBytesAsAnUntieredOne) {
  prometheus::Registry registry;
  ServerMetrics metrics(registry);
  std::vector<std::unique_ptr<RocksDbShardStore>> stores;
  std::vector<std::unique_ptr<ServerJob>> jobs;
  for (const int64_t budget : {int64_t{0}, int64_t{700}}) {
    auto store = RocksDbShardStore::Open(
        {.path = absl::StrCat(dir_, "/data", budget), .rows_file_bytes = 0});
    ASSERT_TRUE(store.ok()) << store.status();
    auto job = ServerJob::Open(
        MakeAssignment(), store->get(), &metrics,
        {.snapshot_log_bytes = 1, .sparse_memory_bytes = budget});
    ASSERT_TRUE(job.ok()) << job.status();
    stores.push_back(*std::move(store));
    jobs.push_back(*std::move(job));
  }
  const auto expect_same = [&stores](const std::string& when) {
    absl::StatusOr<StoredJob> a = stores[0]->Load(kJobId);
    absl::StatusOr<StoredJob> b = stores[1]->Load(kJobId);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->log_sequence, b->log_sequence) << when;
    EXPECT_EQ(a->worker_clocks, b->worker_clocks) << when;
    EXPECT_EQ(a->log, b->log) << when;
    ASSERT_EQ(a->blocks.size(), b->blocks.size()) << when;
    size_t rows = 0;
    for (size_t i = 0; i < a->blocks.size(); ++i) {
      EXPECT_EQ(a->blocks[i].key, b->blocks[i].key) << when;
      EXPECT_EQ(a->blocks[i].values, b->blocks[i].values) << when;
      EXPECT_EQ(a->blocks[i].optimizer_state, b->blocks[i].optimizer_state)
          << when;
      EXPECT_EQ(a->blocks[i].rows, b->blocks[i].rows)
          << when << ", block " << i;
      rows += a->blocks[i].rows.size();
    }
    EXPECT_GT(rows, 0u) << when;
  };
  for (int64_t clock = 0; clock < kClocks; ++clock) {
    for (const std::unique_ptr<ServerJob>& job : jobs) {
      ASSERT_TRUE(PushClocks(*job, clock, clock + 1));
      ASSERT_TRUE(job->Flush().ok());
    }
    expect_same(absl::StrCat("after clock ", clock));
  }
  for (std::unique_ptr<ServerJob>& job : jobs) {
    job->Close(absl::AbortedError("done"));
  }
  expect_same("closed");
}

}  // namespace
}  // namespace ps

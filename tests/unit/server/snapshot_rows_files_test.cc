// A snapshot's sparse rows in files of their own (server/snapshot_rows_files.h;
// docs/durability.md, "The two parts of a server's store"): the marker names
// the file, a crash between the file and the marker leaves the previous
// snapshot and every update-log record after it, a committed snapshot
// survives a crash, two files alternate over many snapshots, a damaged file
// is DATA_LOSS, and a sparse job killed mid-run comes back from its rows
// files and log bit for bit equal to one that never snapshotted. Each crash
// is a real process (a gtest death test, re-executed fresh) ending with
// _exit, which, like kill -9, runs no destructor.
#include "server/snapshot_rows_files.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/rocksdb_shard_store.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "server/state_store.h"
#include "server/update_log_files.h"
#include "tests/testing/crash_child.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kDirVariable[] = "PS_SNAPSHOT_ROWS_FILES_TEST_DIR";
constexpr int kCrashedAfterRowsFile = 42;
constexpr int kCrashedAfterCommit = 43;

// Snapshot `n`: a dense block of value n, buckets 3 and 5 whose rows are
// "rows-n-3" and "rows-n-5", and bucket 6, held and empty.
struct SnapshotData {
  explicit SnapshotData(int n)
      : values{static_cast<float>(n)},
        rows3("rows-" + std::to_string(n) + "-3"),
        rows5("rows-" + std::to_string(n) + "-5") {}
  std::vector<float> values;
  std::string rows3;
  std::string rows5;
  ShardWrite Write(int64_t log_sequence) const {
    ShardWrite write{.job_id = "job",
                     .worker_clocks = {{0, log_sequence}},
                     .log_sequence = log_sequence};
    write.blocks.push_back({.key = 1, .values = values});
    write.blocks.push_back({.key = BucketKey(0, 3), .rows = rows3});
    write.blocks.push_back({.key = BucketKey(0, 5), .rows = rows5});
    write.blocks.push_back({.key = BucketKey(0, 6)});
    return write;
  }
};

// Checks that `job` holds snapshot `n`'s blocks.
void ExpectSnapshot(const StoredJob& job, int n) {
  const SnapshotData data(n);
  ASSERT_EQ(job.blocks.size(), 4u);
  EXPECT_THAT(job.blocks[0].values, ElementsAre(static_cast<float>(n)));
  EXPECT_EQ(job.blocks[1].rows, data.rows3);
  EXPECT_EQ(job.blocks[2].rows, data.rows5);
  EXPECT_EQ(job.blocks[3].key, BucketKey(0, 6));
  EXPECT_THAT(job.blocks[3].rows, IsEmpty());
}

int FilesIn(const std::string& dir) {
  std::error_code error;
  int n = 0;
  for (auto it = fs::directory_iterator(dir, error);
       !error && it != fs::directory_iterator(); it.increment(error)) {
    ++n;
  }
  return n;
}

class SnapshotRowsFilesTest : public testing::CrashChildTest {
 protected:
  SnapshotRowsFilesTest() : CrashChildTest(kDirVariable, "ps_snapshot_rows") {}
  std::unique_ptr<RocksDbShardStore> OpenStore(size_t rows_file_bytes = 0) {
    auto store = RocksDbShardStore::Open(
        {.path = path_, .rows_file_bytes = rows_file_bytes});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  std::string RowsDir() const { return path_ + "/snapshot-rows"; }
};

// In the child: snapshot 1 in a rows file and records 1 to 3 after it,
// closed cleanly; then snapshot 2, including the three records, committed
// by CommitSnapshot with `after_rows_file` as its hook. Exits 1 on any
// error, `after_commit` once the commit returned.
void WriteAndCrash(const std::string& path,
                   std::function<void()> after_rows_file, int after_commit) {
  testing::WriteSnapshotThenThreeRecords({.path = path, .rows_file_bytes = 0},
                                         SnapshotData(1).Write(0));
  auto state = StateStore::Open({.path = path, .create_if_missing = false});
  auto log = UpdateLogFiles::Open(path + "/update-log");
  auto rows = SnapshotRowsFiles::Open(path + "/snapshot-rows");
  if (!state.ok() || !log.ok() || !rows.ok()) _exit(1);
  const SnapshotData second(2);
  if (!CommitSnapshot(**state, **log, second.Write(3),
                      {.files = rows->get(),
                       .min_bytes = 0,
                       .after_rows_file = std::move(after_rows_file)})
           .ok()) {
    _exit(1);
  }
  _exit(after_commit);  // No destructor: nothing flushed on close.
}

// A crash after the new rows file, before the state store's batch: the
// marker still names snapshot 1's file, which the new one did not touch,
// and the log kept records 1 to 3.
TEST_F(SnapshotRowsFilesTest, ACrashBeforeTheMarkerKeepsThePreviousSnapshot) {
  EXPECT_EXIT(WriteAndCrash(
                  path_, [] { _exit(kCrashedAfterRowsFile); }, 0),
              ::testing::ExitedWithCode(kCrashedAfterRowsFile), "");
  EXPECT_EQ(FilesIn(RowsDir()), 2);  // Snapshot 1's, and the orphan.
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 0);
  ExpectSnapshot(*job, 1);
  EXPECT_THAT(job->worker_clocks, ElementsAre(std::pair(0, 0)));
  EXPECT_THAT(job->log, ElementsAre("r1", "r2", "r3"));
  // The job goes on: a record, then a snapshot that overwrites the orphan.
  ASSERT_TRUE(store->AppendLog("job", 4, {"r4"}, false).ok());
  ASSERT_TRUE(store->Write(SnapshotData(4).Write(4)).ok());
  job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectSnapshot(*job, 4);
  EXPECT_THAT(job->log, IsEmpty());
}

// A crash right after the commit returned: snapshot 2 comes from its file,
// and the records it includes are dropped.
TEST_F(SnapshotRowsFilesTest, ACommittedSnapshotSurvivesACrash) {
  EXPECT_EXIT(WriteAndCrash(path_, nullptr, kCrashedAfterCommit),
              ::testing::ExitedWithCode(kCrashedAfterCommit), "");
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 3);
  ExpectSnapshot(*job, 2);
  EXPECT_THAT(job->worker_clocks, ElementsAre(std::pair(0, 3)));
  EXPECT_THAT(job->log, IsEmpty());
  ASSERT_TRUE(store->AppendLog("job", 4, {"r4"}, false).ok());
  job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("r4"));
}

// Many snapshots use two files in turn; one below the threshold puts its
// rows back in RocksDB and deletes the files; DeleteJob deletes them too.
TEST_F(SnapshotRowsFilesTest, SnapshotsAlternateTwoFilesUntilOneIsSmall) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (int n = 1; n <= 6; ++n) {
    ASSERT_TRUE(store->AppendLog("job", n, {"r"}, false).ok());
    ASSERT_TRUE(store->Write(SnapshotData(n).Write(n)).ok());
    absl::StatusOr<StoredJob> job = store->Load("job");
    ASSERT_TRUE(job.ok()) << job.status();
    ExpectSnapshot(*job, n);
    EXPECT_EQ(job->log_sequence, n);
    EXPECT_EQ(FilesIn(RowsDir()), n == 1 ? 1 : 2);
  }
  store.reset();
  store = OpenStore(/*rows_file_bytes=*/1 << 20);
  ASSERT_NE(store, nullptr);
  // Without a log sequence: the stored marker stays (as in every store),
  // without the file's number.
  ASSERT_TRUE(store->Write(SnapshotData(7).Write(0)).ok());
  EXPECT_EQ(FilesIn(RowsDir()), 0);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectSnapshot(*job, 7);
  EXPECT_EQ(job->log_sequence, 6);
  store.reset();
  store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Write(SnapshotData(8).Write(0)).ok());
  EXPECT_EQ(FilesIn(RowsDir()), 1);
  job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectSnapshot(*job, 8);
  EXPECT_EQ(job->log_sequence, 6);
  ASSERT_TRUE(store->DeleteJob("job").ok());
  EXPECT_EQ(FilesIn(RowsDir()), 0);
  EXPECT_TRUE(absl::IsNotFound(store->Load("job").status()));
}

// Under SYNC the file is fdatasync'ed (and its directory entry fsynced when
// new) before the marker: both files, then a reopen, read back whole.
TEST_F(SnapshotRowsFilesTest, SyncedSnapshotsReadBackAfterAReopen) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (int n = 1; n <= 3; ++n) {
    const SnapshotData data(n);  // The write's spans point into it.
    ShardWrite write = data.Write(n);
    write.sync = true;
    ASSERT_TRUE(store->AppendLog("job", n, {"r"}, true).ok());
    ASSERT_TRUE(store->Write(write).ok());
  }
  store.reset();
  store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectSnapshot(*job, 3);
  EXPECT_EQ(job->log_sequence, 3);
}

// The file the marker names, damaged: DATA_LOSS naming the problem, never
// rows read wrong.
TEST_F(SnapshotRowsFilesTest, ADamagedRowsFileIsDataLoss) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Write(SnapshotData(1).Write(0)).ok());
  const std::string file =
      RowsDir() + "/" +
      fs::directory_iterator(RowsDir())->path().filename().string();
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 40u);
  const auto rewrite = [&](const std::string& contents) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << contents;
  };
  std::string flipped = bytes;
  flipped[bytes.size() - 12] ^= 1;  // A byte of the last bucket's rows.
  rewrite(flipped);
  absl::Status status = store->Load("job").status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("fails its checksum"));
  rewrite(bytes.substr(0, bytes.size() - 3));
  status = store->Load("job").status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("cut short"));
  fs::remove(file);
  status = store->Load("job").status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("missing"));
  rewrite(bytes);
  EXPECT_TRUE(store->Load("job").ok());
}

}  // namespace
}  // namespace ps

// A large snapshot written without RocksDB's write-ahead log (StateStore::
// PutSnapshot; docs/durability.md, "The two parts of a server's store"): a
// crash between its batch and its flush must leave the previous snapshot and
// every update-log record after it, and once PutSnapshot returns the
// snapshot must survive a crash. Each crash is a real process (a gtest death
// test, re-executed fresh) ending with _exit, which, like kill -9, runs no
// destructor: no flush on close, memtables lost, only files kept.
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/rocksdb_shard_store.h"
#include "server/state_store.h"
#include "server/update_log_files.h"
#include "tests/testing/crash_child.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kDirVariable[] = "PS_STATE_STORE_UNLOGGED_TEST_DIR";
constexpr int kCrashedBeforeFlush = 42;
constexpr int kCrashedAfterCommit = 43;

// The block of snapshot `n`: a dense block of value n and a sparse bucket
// whose rows are the bytes "rows-n".
struct SnapshotData {
  explicit SnapshotData(int n)
      : values{static_cast<float>(n)}, rows("rows-" + std::to_string(n)) {}
  std::vector<float> values;
  std::string rows;
  ShardWrite Write(int64_t log_sequence) const {
    ShardWrite write{.job_id = "job",
                     .worker_clocks = {{0, log_sequence}},
                     .log_sequence = log_sequence};
    write.blocks.push_back({.key = 1, .values = values});
    write.blocks.push_back({.key = BucketKey(0, 3), .rows = rows});
    return write;
  }
};

// In the child: snapshot 1 (through the default, logged path) and records 1
// to 3 after it, closed cleanly; then snapshot 2, including the three
// records, committed by CommitSnapshot on a state store whose every
// snapshot is unlogged, with `before_flush` as its hook. Exits 1 on any
// error, `after_commit` once the commit returned.
void WriteAndCrash(const std::string& path, std::function<void()> before_flush,
                   int after_commit) {
  testing::WriteSnapshotThenThreeRecords({.path = path},
                                         SnapshotData(1).Write(0));
  auto state =
      StateStore::Open({.path = path,
                        .create_if_missing = false,
                        .unlogged_snapshot_bytes = 0,
                        .before_snapshot_flush = std::move(before_flush)});
  auto log = UpdateLogFiles::Open(path + "/update-log");
  if (!state.ok() || !log.ok()) _exit(1);
  const SnapshotData second(2);
  if (!CommitSnapshot(**state, **log, second.Write(3)).ok()) _exit(1);
  _exit(after_commit);  // No destructor: the memtables are not flushed.
}

class StateStoreUnloggedTest : public testing::CrashChildTest {
 protected:
  StateStoreUnloggedTest()
      : CrashChildTest(kDirVariable, "ps_state_store_unlogged") {}
};

// A crash after the unlogged batch, before its flush: the batch is gone
// whole, and the store holds snapshot 1 and records 1 to 3, which the log
// was not allowed to drop; the log goes on from record 4.
TEST_F(StateStoreUnloggedTest, ACrashBeforeTheFlushKeepsThePreviousSnapshot) {
  EXPECT_EXIT(WriteAndCrash(
                  path_, [] { _exit(kCrashedBeforeFlush); }, 0),
              ::testing::ExitedWithCode(kCrashedBeforeFlush), "");
  auto store = RocksDbShardStore::Open({.path = path_});
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<StoredJob> job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 0);
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_THAT(job->blocks[0].values, ElementsAre(1.0f));
  EXPECT_EQ(job->blocks[1].rows, "rows-1");
  EXPECT_THAT(job->worker_clocks, ElementsAre(std::pair(0, 0)));
  EXPECT_THAT(job->log, ElementsAre("r1", "r2", "r3"));
  ASSERT_TRUE((*store)->AppendLog("job", 4, {"r4"}, false).ok());
  job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("r1", "r2", "r3", "r4"));
}

// A crash right after the commit returned: the unlogged snapshot is in the
// table files (its flush made it durable) and the records it includes are
// dropped.
TEST_F(StateStoreUnloggedTest, ACommittedUnloggedSnapshotSurvivesACrash) {
  EXPECT_EXIT(WriteAndCrash(path_, nullptr, kCrashedAfterCommit),
              ::testing::ExitedWithCode(kCrashedAfterCommit), "");
  auto store = RocksDbShardStore::Open({.path = path_});
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<StoredJob> job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 3);
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_THAT(job->blocks[0].values, ElementsAre(2.0f));
  EXPECT_EQ(job->blocks[1].rows, "rows-2");
  EXPECT_THAT(job->worker_clocks, ElementsAre(std::pair(0, 3)));
  EXPECT_THAT(job->log, IsEmpty());
  ASSERT_TRUE((*store)->AppendLog("job", 4, {"r4"}, false).ok());
  job = (*store)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("r4"));
}

// The same write through the default threshold (a few bytes: logged), and
// a crash after it: the write-ahead log keeps it.
TEST_F(StateStoreUnloggedTest, ASmallSnapshotStaysLogged) {
  EXPECT_EXIT(
      {
        auto state = StateStore::Open({.path = dir_});
        if (!state.ok() ||
            !(*state)->PutSnapshot(SnapshotData(5).Write(0)).ok()) {
          _exit(1);
        }
        _exit(kCrashedAfterCommit);
      },
      ::testing::ExitedWithCode(kCrashedAfterCommit), "");
  auto state = StateStore::Open({.path = dir_});
  ASSERT_TRUE(state.ok()) << state.status();
  absl::StatusOr<StoredJob> job = (*state)->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_THAT(job->blocks[0].values, ElementsAre(5.0f));
  EXPECT_EQ(job->blocks[1].rows, "rows-5");
}

}  // namespace
}  // namespace ps

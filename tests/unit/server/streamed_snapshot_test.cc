// A tiered table's snapshot streamed into its rows file (docs/sparse.md,
// "Snapshots of a tiered table", "Memory"; server/sparse_snapshot_stream.h,
// ShardStore::WriteStreamed): the store holds the same bytes, file and all,
// as a whole snapshot of an untiered twin's, while the stream holds one
// encoded bucket at a time; a crash in the middle of the file (a real
// process ended by _exit while the stream is pulled) leaves the previous
// snapshot and every record after it.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/bucket_rows_source.h"
#include "server/rocksdb_shard_store.h"
#include "server/snapshot_rows_files.h"
#include "server/sparse_snapshot_stream.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"
#include "tests/testing/crash_child.h"
#include "tests/testing/test_tier.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

constexpr char kDirVariable[] = "PS_STREAMED_SNAPSHOT_TEST_DIR";
constexpr int kCrashedMidFile = 44;
constexpr int kBuckets = 64;

v1::SparseTableSpec Spec() {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(4);
  spec.set_num_buckets(kBuckets);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  spec.mutable_admission()->set_min_count(2);  // Pending counts stored too.
  return spec;
}

// A table with a few rows in memory and thousands in its tier, and a twin
// without a budget, driven alike.
struct Tables {
  Tables() {
    tier = testing::OpenTestTier();
    auto a = SparseTable::Create(Spec(), 0, 5, false,
                                 {.tier = tier.get(), .cap_bytes = 4096});
    auto b = SparseTable::Create(Spec(), 0, 5, false);
    EXPECT_TRUE(a.ok() && b.ok());
    if (a.ok()) tiered = *std::move(a);
    if (b.ok()) plain = *std::move(b);
  }
  // Clocks [from, to): each pushes 300 ids (a window moving by 250, each
  // pushed twice or more: admitted), then the tier drained or not.
  void Drive(int64_t from, int64_t to) {
    for (int64_t clock = from; clock < to; ++clock) {
      std::vector<uint64_t> ids(300);
      for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<uint64_t>(clock * 250 / 2 + i) * 7919;
      }
      std::vector<float> grads(ids.size() * 4);
      for (size_t i = 0; i < grads.size(); ++i) {
        grads[i] = static_cast<float>((i + clock) % 13) / 13 - 0.5f;
      }
      tiered->Apply(ids, grads, clock, 1.0f);
      plain->Apply(ids, grads, clock, 1.0f);
    }
  }
  std::unique_ptr<SparseTier> tier;
  std::unique_ptr<SparseTable> tiered;
  std::unique_ptr<SparseTable> plain;
};

// Snapshot `sequence`'s write but the table's buckets: a dense block.
struct DenseBlock {
  explicit DenseBlock(int64_t sequence)
      : values{static_cast<float>(sequence), 2.5f} {}
  ShardWrite Write(int64_t sequence) const {
    ShardWrite write{.job_id = "job",
                     .worker_clocks = {{0, sequence}},
                     .log_sequence = sequence};
    write.blocks.push_back({.key = 1, .values = values});
    return write;
  }
  std::vector<float> values;
};

std::map<std::string, std::string> FilesIn(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    files[entry.path().filename().string()].assign(
        std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

// `job` holds the dense block of `sequence` and `want`'s buckets.
void ExpectStored(const StoredJob& job, int64_t sequence,
                  const std::vector<StoredBlock>& want) {
  ASSERT_EQ(job.blocks.size(), want.size() + 1);
  EXPECT_THAT(job.blocks[0].values,
              ElementsAre(static_cast<float>(sequence), 2.5f));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(job.blocks[i + 1].key, want[i].key) << i;
    EXPECT_EQ(job.blocks[i + 1].rows, want[i].rows) << i;
  }
}

class StreamedSnapshotTest : public testing::CrashChildTest {
 protected:
  StreamedSnapshotTest()
      : CrashChildTest(kDirVariable, "ps_streamed_snapshot") {}
  std::unique_ptr<RocksDbShardStore> OpenStore(const std::string& path) {
    auto store = RocksDbShardStore::Open({.path = path, .rows_file_bytes = 0});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
};

// Two snapshots of a tiered table streamed into one store (the second one
// over the tier changed since the first), and the untiered twin's whole
// snapshots written into another: the two stores' rows files are the same
// bytes, and so is what they load. The stream encoded each bucket with rows
// once, into one buffer never larger than the largest bucket (not the
// snapshot: a sixty-fourth of it here).
TEST_F(StreamedSnapshotTest,
       TheStoreHoldsTheWholeSnapshotsBytesOneBucketAtATime) {
  Tables tables;
  ASSERT_NE(tables.tiered, nullptr);
  auto streamed = OpenStore(dir_ + "/streamed");
  auto whole = OpenStore(dir_ + "/whole");
  ASSERT_TRUE(streamed != nullptr && whole != nullptr);
  int64_t clock = 0;
  for (const int64_t sequence : {1, 2}) {
    tables.Drive(clock, clock + 20);
    clock += 20;
    ASSERT_GT(tables.tiered->tier_counts().cold_rows, 1000);
    const SparseTableCut cut = tables.tiered->Cut();
    const std::unique_ptr<SparseTier::View> view = tables.tier->ViewNow();
    const std::vector<StoredBlock> want = tables.plain->Snapshot();
    tables.Drive(clock, clock + 3);  // The tier changes after the cut.
    clock += 3;
    const DenseBlock dense(sequence);
    SparseSnapshotStream stream(*view, std::span(&cut, 1));
    ASSERT_TRUE(streamed->AppendLog("job", sequence, {"r"}, false).ok());
    ASSERT_TRUE(streamed->WriteStreamed(dense.Write(sequence), stream).ok());
    ShardWrite write = dense.Write(sequence);
    size_t with_rows = 0;
    size_t largest = 0;
    size_t total = 0;
    for (const StoredBlock& b : want) {
      write.blocks.push_back({.key = b.key, .rows = b.rows});
      with_rows += b.rows.empty() ? 0 : 1;
      largest = std::max(largest, b.rows.size());
      total += b.rows.size();
    }
    ASSERT_TRUE(whole->AppendLog("job", sequence, {"r"}, false).ok());
    ASSERT_TRUE(whole->Write(write).ok());

    const auto files = FilesIn(dir_ + "/streamed/snapshot-rows");
    EXPECT_EQ(files.size(), static_cast<size_t>(sequence));
    EXPECT_EQ(files, FilesIn(dir_ + "/whole/snapshot-rows"));
    absl::StatusOr<StoredJob> job = streamed->Load("job");
    ASSERT_TRUE(job.ok()) << job.status();
    ExpectStored(*job, sequence, want);
    EXPECT_EQ(job->log_sequence, sequence);

    EXPECT_EQ(stream.buckets_encoded(), static_cast<int64_t>(with_rows));
    EXPECT_GT(with_rows, size_t{kBuckets} / 2);
    EXPECT_EQ(stream.max_held_bytes(), largest);
    EXPECT_LT(stream.max_held_bytes() * 16, total);
    EXPECT_EQ(BucketRowsBytes(stream), total);
  }
}

// A source that measures, each time the store asks it for a bucket, how
// many bytes it has produced that are not in the rows file yet: what the
// store's writer holds at that moment (its write buffer, and anything it
// kept).
class WatchedSource final : public BucketRowsSource {
 public:
  WatchedSource(BucketRowsSource& source, std::string file)
      : source_(source), file_(std::move(file)) {}
  std::span<const BucketRowsSize> buckets() const override {
    return source_.buckets();
  }
  absl::StatusOr<std::string_view> Next() override {
    std::error_code error;
    const auto on_disk = static_cast<int64_t>(fs::file_size(file_, error));
    held_ = std::max(held_, produced_ - (error ? 0 : on_disk));
    absl::StatusOr<std::string_view> rows = source_.Next();
    if (rows.ok()) produced_ += static_cast<int64_t>(rows->size()) + 16;
    return rows;
  }
  int64_t produced() const { return produced_; }
  int64_t held() const { return held_; }

 private:
  BucketRowsSource& source_;
  const std::string file_;
  int64_t produced_ = 0;  // Entries' bytes (16 bytes of key and size each).
  int64_t held_ = 0;
};

// A snapshot of about 8 MB streamed into a new rows file: whenever the
// store asks for the next bucket, every byte produced before is in the
// file but for at most the rows file's 4 MiB write buffer (a store that
// encoded the snapshot whole first would hold all of it). What it wrote
// loads back as the untiered twin's snapshot.
TEST_F(StreamedSnapshotTest, TheWriterHoldsAtMostItsBufferOfTheSnapshot) {
  v1::SparseTableSpec spec = Spec();
  spec.set_dim(16);
  spec.clear_admission();
  std::unique_ptr<SparseTier> tier = testing::OpenTestTier();
  auto tiered = SparseTable::Create(spec, 0, 5, false,
                                    {.tier = tier.get(), .cap_bytes = 1 << 16});
  auto plain = SparseTable::Create(spec, 0, 5, false);
  ASSERT_TRUE(tiered.ok() && plain.ok());
  std::vector<uint64_t> ids(8192);
  const std::vector<float> grads(ids.size() * 16, 0.25f);
  for (int64_t clock = 0; clock < 11; ++clock) {
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = (static_cast<uint64_t>(clock) * ids.size() + i) * 7919;
    }
    (*tiered)->Apply(ids, grads, clock, 1.0f);
    (*plain)->Apply(ids, grads, clock, 1.0f);
  }
  auto store = OpenStore(path_);
  ASSERT_NE(store, nullptr);
  auto files = SnapshotRowsFiles::Open(path_ + "/snapshot-rows");
  ASSERT_TRUE(files.ok()) << files.status();
  const SparseTableCut cut = (*tiered)->Cut();
  const std::unique_ptr<SparseTier::View> view = tier->ViewNow();
  SparseSnapshotStream stream(*view, std::span(&cut, 1));
  WatchedSource watched(stream, (*files)->PathOf("job", 1));
  ASSERT_TRUE(store->WriteStreamed(DenseBlock(1).Write(1), watched).ok());
  EXPECT_GT(watched.produced(), int64_t{6} << 20);
  EXPECT_LE(watched.held(), int64_t{4} << 20);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectStored(*job, 1, (*plain)->Snapshot());
}

// A source that ends the process (as kill -9 would) once it has produced
// `buckets` buckets: the rows file is then partly written.
class CrashingSource final : public BucketRowsSource {
 public:
  CrashingSource(BucketRowsSource& source, int buckets)
      : source_(source), left_(buckets) {}
  std::span<const BucketRowsSize> buckets() const override {
    return source_.buckets();
  }
  absl::StatusOr<std::string_view> Next() override {
    if (left_-- == 0) _exit(kCrashedMidFile);
    return source_.Next();
  }

 private:
  BucketRowsSource& source_;
  int left_;
};

// In the child: snapshot 1 streamed and records 2 to 4 after it; then
// snapshot 2 (including them) streamed until the process ends halfway
// through its rows file. The reopened store loads snapshot 1 from its file,
// then the records; the job goes on, and its next streamed snapshot
// overwrites the half-written file.
TEST_F(StreamedSnapshotTest, ACrashHalfwayThroughTheFileKeepsThePrevious) {
  const auto write_then_crash = [this] {
    Tables tables;
    tables.Drive(0, 20);
    auto store = OpenStore(path_);
    if (store == nullptr) _exit(1);
    {
      const SparseTableCut cut = tables.tiered->Cut();
      const std::unique_ptr<SparseTier::View> view = tables.tier->ViewNow();
      SparseSnapshotStream stream(*view, std::span(&cut, 1));
      if (!store->AppendLog("job", 1, {"r1"}, false).ok() ||
          !store->WriteStreamed(DenseBlock(1).Write(1), stream).ok() ||
          !store->AppendLog("job", 2, {"r2", "r3", "r4"}, false).ok()) {
        _exit(1);
      }
    }
    tables.Drive(20, 30);
    const SparseTableCut cut = tables.tiered->Cut();
    const std::unique_ptr<SparseTier::View> view = tables.tier->ViewNow();
    SparseSnapshotStream stream(*view, std::span(&cut, 1));
    CrashingSource crashing(stream, kBuckets / 2);
    (void)store->WriteStreamed(DenseBlock(4).Write(4), crashing);
    _exit(1);  // Not reached: the source ends the process.
  };
  EXPECT_EXIT(write_then_crash(), ::testing::ExitedWithCode(kCrashedMidFile),
              "");
  Tables tables;
  tables.Drive(0, 20);
  const std::vector<StoredBlock> first = tables.plain->Snapshot();
  auto store = OpenStore(path_);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 1);
  ExpectStored(*job, 1, first);
  EXPECT_THAT(job->worker_clocks, ElementsAre(std::pair(0, 1)));
  EXPECT_THAT(job->log, ElementsAre("r2", "r3", "r4"));

  tables.Drive(20, 30);
  const SparseTableCut cut = tables.tiered->Cut();
  const std::unique_ptr<SparseTier::View> view = tables.tier->ViewNow();
  SparseSnapshotStream stream(*view, std::span(&cut, 1));
  ASSERT_TRUE(store->WriteStreamed(DenseBlock(4).Write(4), stream).ok());
  job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 4);
  ExpectStored(*job, 4, tables.plain->Snapshot());
  EXPECT_TRUE(job->log.empty());
}

// A source whose rows are not those it counted stops the write in the
// rows file: nothing is committed, and the store keeps what it had.
TEST_F(StreamedSnapshotTest, AViewThatDisagreesWithItsCutCommitsNothing) {
  Tables tables;
  tables.Drive(0, 20);
  auto store = OpenStore(path_);
  ASSERT_NE(store, nullptr);
  const SparseTableCut cut = tables.tiered->Cut();
  // A view of a later moment: the rows demoted since are not counted.
  tables.Drive(20, 26);
  const std::unique_ptr<SparseTier::View> view = tables.tier->ViewNow();
  SparseSnapshotStream stream(*view, std::span(&cut, 1));
  const absl::Status status =
      store->WriteStreamed(DenseBlock(1).Write(1), stream);
  EXPECT_TRUE(absl::IsInternal(status)) << status;
  EXPECT_TRUE(absl::IsNotFound(store->Load("job").status()));
}

}  // namespace
}  // namespace ps

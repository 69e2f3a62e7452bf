// What a RocksDbShardStore leaves on disk: a clean close leaves no write-ahead
// log behind, and DeleteJob gives a job's space back (its SST files and its
// share of the log), not only hides its keys.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/rocksdb_shard_store.h"
#include "tests/testing/scoped_temp_dir.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

constexpr size_t kBlockElems = 262144;  // 1 MiB of float32.

class RocksDbDiskTest : public ::testing::Test {
 protected:
  std::unique_ptr<RocksDbShardStore> Open() {
    auto store = RocksDbShardStore::Open({.path = dir_.File("db")});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Bytes of the database's table files (*.sst) and write-ahead logs (*.log):
  // the space its data takes (the rest is a few KiB of MANIFEST, OPTIONS and
  // the info LOG).
  uint64_t Bytes(const std::string& extension) const {
    uint64_t total = 0;
    for (const auto& entry : fs::directory_iterator(dir_.File("db"))) {
      if (entry.is_regular_file() && entry.path().extension() == extension) {
        total += entry.file_size();
      }
    }
    return total;
  }
  uint64_t DataBytes() const { return Bytes(".sst") + Bytes(".log"); }

  // `pushes` writes of `blocks` 1 MiB blocks with 1 MiB of optimizer state
  // each, and the clock of worker 0, as a training job's pushes are.
  static void Train(ShardStore* store, const std::string& job_id, int blocks,
                    int pushes) {
    std::vector<float> values(kBlockElems, 0.5f);
    std::vector<float> state(kBlockElems, 0.25f);
    for (int push = 0; push < pushes; ++push) {
      ShardWrite write{.job_id = job_id};
      for (int b = 0; b < blocks; ++b) {
        write.blocks.push_back({.key = static_cast<uint64_t>(b),
                                .values = values,
                                .optimizer_state = state,
                                .optimizer_step = push + 1});
      }
      write.worker_clocks.emplace_back(0, push + 1);
      ASSERT_TRUE(store->Write(write).ok());
    }
  }

  testing::ScopedTempDir dir_{"ps_rocksdb_disk_test"};
};

TEST_F(RocksDbDiskTest, CleanCloseLeavesNoWriteAheadLog) {
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    Train(store.get(), "job-1", 4, 6);  // 48 MiB through the log.
  }
  const uint64_t wal = Bytes(".log");
  RecordProperty("wal_bytes_after_close", absl::StrCat(wal));
  EXPECT_LT(wal, uint64_t{64} << 10) << "write-ahead log left after a close";
  // Nothing was lost: the data is in table files now.
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto job = store->Load("job-1");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 4u);
  EXPECT_EQ(job->blocks[3].optimizer_step, 6);
  EXPECT_EQ(job->blocks[3].values[kBlockElems - 1], 0.5f);
  EXPECT_EQ(job->worker_clocks.at(0), 6);
}

TEST_F(RocksDbDiskTest, DeleteJobGivesItsSpaceBack) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  Train(store.get(), "job-1", 8, 3);  // 16 MiB of state, 48 MiB written.
  Train(store.get(), "job-2", 1, 1);  // 2 MiB, kept.
  const uint64_t before = DataBytes();
  EXPECT_GE(before, uint64_t{18} << 20);
  ASSERT_TRUE(store->DeleteJob("job-1").ok());
  const uint64_t after = DataBytes();
  RecordProperty("data_bytes_before_delete", absl::StrCat(before));
  RecordProperty("data_bytes_after_delete", absl::StrCat(after));
  // What is left is job-2's 2 MiB (and a little per-file overhead).
  EXPECT_LT(after, uint64_t{3} << 20) << "before: " << before;
  auto jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_THAT(*jobs, ElementsAre("job-2"));
  auto kept = store->Load("job-2");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->blocks.size(), 1u);
  // And it stays so after a clean close.
  store.reset();
  EXPECT_LT(DataBytes(), uint64_t{3} << 20);
}

}  // namespace
}  // namespace ps

// The import of a lost server's state into the server that takes its place
// (server/rebuild_import.h): the snapshot, the update-log records after it
// and the clocks arrive unchanged, under the new map; a second import does
// nothing; a directory another store holds open (its RocksDB lock: a lost
// server still running) is not copied from; a directory holding the job
// under other units is refused; a server whose map changed only in another
// place's address keeps its state.
#include "server/rebuild_import.h"

#include <memory>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/memory_shard_store.h"
#include "server/rocksdb_shard_store.h"
#include "server/server_job.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class RebuildImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    old_ = testing::TinyAssignment("job-7", 4, 3, 5, 2, "10.0.0.1:7000",
                                   [](v1::JobSpec*) {});
    rebuilt_ = old_;
    rebuilt_.mutable_shard_map()->set_version(2);
    rebuilt_.mutable_shard_map()->set_servers(0, "10.0.0.9:7000");
    rebuilt_.set_rebuild_from_data_dir(dir_.File("lost"));
    rebuilt_.set_rebuild_map_version(2);
  }

  // The lost server's directory: a snapshot at record 3 and two records.
  std::unique_ptr<RocksDbShardStore> WriteLost() {
    auto store = RocksDbShardStore::Open({.path = dir_.File("lost")});
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    std::vector<float> values = {1.5f, -2.0f, 3.25f};
    std::vector<float> state = {0.5f};
    ShardWrite write{.job_id = "job-7", .log_sequence = 3};
    write.blocks.push_back({.key = 1,
                            .values = values,
                            .optimizer_state = state,
                            .optimizer_step = 9});
    write.worker_clocks = {{0, 12}, {1, 12}};
    EXPECT_TRUE((*store)->Write(write).ok());
    EXPECT_TRUE((*store)->AppendLog("job-7", 4, {"rec4", "rec5"}, false).ok());
    EXPECT_TRUE((*store)->PutJobMeta("job-7", StoredJobMeta(old_)).ok());
    return *std::move(store);
  }

  testing::ScopedTempDir dir_{"rebuild_import"};
  v1::Assignment old_;
  v1::Assignment rebuilt_;
};

TEST_F(RebuildImportTest, TheLostStateArrivesUnchangedUnderTheNewMap) {
  WriteLost().reset();  // Closed: the lost server is dead.
  std::unique_ptr<MemoryShardStore> owned = MemoryShardStore::Create();
  MemoryShardStore& mine = *owned;
  ASSERT_TRUE(ImportRebuiltPlace(rebuilt_, &mine, &OpenLostStore).ok());
  auto got = mine.Load("job-7");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->meta, StoredJobMeta(WithoutRebuild(rebuilt_)));
  ASSERT_EQ(got->blocks.size(), 1u);
  EXPECT_EQ(got->blocks[0].key, 1u);
  EXPECT_EQ(got->blocks[0].values, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(got->blocks[0].optimizer_state, (std::vector<float>{0.5f}));
  EXPECT_EQ(got->blocks[0].optimizer_step, 9);
  EXPECT_EQ(got->worker_clocks, (std::map<int32_t, int64_t>{{0, 12}, {1, 12}}));
  EXPECT_EQ(got->log_sequence, 3);
  EXPECT_EQ(got->log, (std::vector<std::string>{"rec4", "rec5"}));

  // Imported once: the next assignment opens nothing.
  const LostStoreOpener refuse =
      [](const std::string&) -> absl::StatusOr<std::unique_ptr<ShardStore>> {
    return absl::InternalError("opened again");
  };
  EXPECT_TRUE(ImportRebuiltPlace(rebuilt_, &mine, refuse).ok());
}

TEST_F(RebuildImportTest, ADirectoryStillHeldOpenIsNotCopiedFrom) {
  std::unique_ptr<RocksDbShardStore> alive = WriteLost();
  ASSERT_NE(alive, nullptr);
  std::unique_ptr<MemoryShardStore> owned = MemoryShardStore::Create();
  MemoryShardStore& mine = *owned;
  const absl::Status status =
      ImportRebuiltPlace(rebuilt_, &mine, &OpenLostStore);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(absl::IsNotFound(mine.Load("job-7").status()));
  alive.reset();  // It died: the next try imports.
  EXPECT_TRUE(ImportRebuiltPlace(rebuilt_, &mine, &OpenLostStore).ok());
  EXPECT_TRUE(mine.Load("job-7").ok());
}

TEST_F(RebuildImportTest, OtherUnitsOrNoStateAreRefused) {
  std::unique_ptr<MemoryShardStore> owned = MemoryShardStore::Create();
  MemoryShardStore& mine = *owned;
  v1::Assignment other = rebuilt_;
  other.set_rebuild_from_data_dir(dir_.File("none"));
  EXPECT_FALSE(ImportRebuiltPlace(other, &mine, &OpenLostStore).ok());
  WriteLost().reset();
  other = rebuilt_;
  other.mutable_shard_map()->mutable_blocks(0)->set_num_elems(99);
  const absl::Status status = ImportRebuiltPlace(other, &mine, &OpenLostStore);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("under other units"));
  EXPECT_FALSE(ImportRebuiltPlace(rebuilt_, nullptr, &OpenLostStore).ok());
}

TEST_F(RebuildImportTest, AnotherPlaceReaddressedKeepsThisPlacesState) {
  // Two servers; this one is server 0, and server 1 was rebuilt elsewhere.
  v1::Assignment two = old_;
  two.mutable_shard_map()->add_servers("10.0.0.2:7000");
  two.mutable_shard_map()->mutable_blocks(0)->set_server(1);
  std::unique_ptr<MemoryShardStore> owned = MemoryShardStore::Create();
  MemoryShardStore& mine = *owned;
  ASSERT_TRUE(mine.PutJobMeta("job-7", StoredJobMeta(two)).ok());
  v1::Assignment next = two;
  next.mutable_shard_map()->set_version(2);
  next.mutable_shard_map()->set_servers(1, "10.0.0.9:7000");
  auto kept = KeepStateUnderNewAddresses(next, &mine);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(*kept);
  EXPECT_EQ(mine.Load("job-7")->meta, StoredJobMeta(next));
  // This place's own address changed, or units moved: not this state.
  v1::Assignment moved = next;
  moved.mutable_shard_map()->set_version(3);
  moved.mutable_shard_map()->set_servers(0, "10.0.0.8:7000");
  EXPECT_FALSE(*KeepStateUnderNewAddresses(moved, &mine));
  moved = next;
  moved.mutable_shard_map()->set_version(3);
  moved.mutable_shard_map()->mutable_blocks(0)->set_server(0);
  EXPECT_FALSE(*KeepStateUnderNewAddresses(moved, &mine));
}

TEST_F(RebuildImportTest, TheSharedDirectoryMustHoldTheDataDirectory) {
  auto ok = ResolveSharedDataDir("/mnt/ps/", "/mnt/ps/a/");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->root, "/mnt/ps");
  EXPECT_EQ(ok->data_dir, "/mnt/ps/a");
  EXPECT_FALSE(ResolveSharedDataDir("/mnt/ps", "/mnt/psx/a").ok());
  EXPECT_FALSE(ResolveSharedDataDir("/mnt/ps", "/mnt/ps").ok());
  EXPECT_FALSE(ResolveSharedDataDir("/mnt/ps", "").ok());
}

}  // namespace
}  // namespace ps

// What only RocksDbShardStore has: data and log survive a close and reopen,
// a gap in the log or a malformed record is data loss, a store made before
// the log family gets it, opening errors, and the write-latency observer.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/shard_store_fixture.h"

namespace ps::shard_store_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST_F(RocksDbShardStoreTest, DataSurvivesCloseAndReopen) {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> state = {0.5f, 0.25f, 0.125f, 0.0625f,
                                    1.0f, 2.0f,  3.0f,   4.0f};
  {
    std::unique_ptr<RocksDbShardStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ShardWrite write{.job_id = "job"};
    write.blocks.push_back({.key = Key(3, 1),
                            .values = values,
                            .optimizer_state = state,
                            .optimizer_step = 12});
    write.worker_clocks = {{0, 12}, {1, 11}};
    ASSERT_TRUE(store->Write(write).ok());  // sync=false: WAL, no fsync.
    ASSERT_TRUE(store->PutJobMeta("job", "assignment v3").ok());
    ASSERT_TRUE(store->PutJobMeta("gone", "x").ok());
    ASSERT_TRUE(store->DeleteJob("gone").ok());
  }
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->meta, "assignment v3");
  ASSERT_EQ(job->blocks.size(), 1u);
  EXPECT_EQ(job->blocks[0].key, Key(3, 1));
  EXPECT_EQ(job->blocks[0].values, values);
  EXPECT_EQ(job->blocks[0].optimizer_state, state);
  EXPECT_EQ(job->blocks[0].optimizer_step, 12);
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, 12), Pair(1, 11)));
  absl::StatusOr<std::vector<std::string>> jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, ElementsAre("job"));
}

TEST_F(RocksDbShardStoreTest, LogSurvivesCloseAndReopen) {
  {
    std::unique_ptr<RocksDbShardStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->AppendLog("job", 1, {"r1", "r2", "r3"}, false).ok());
    ASSERT_TRUE(store->Write({.job_id = "job", .log_sequence = 1}).ok());
  }
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 1);
  EXPECT_THAT(job->log, ElementsAre("r2", "r3"));
}

TEST_F(RocksDbShardStoreTest, AGapInTheLogIsDataLoss) {
  {
    std::unique_ptr<RocksDbShardStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->AppendLog("job", 1, {"r1"}, false).ok());
  }
  // Record 3 without record 2.
  std::string key = RawBlockKey("job", 3);
  PutRaw("log", key, "r3");
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(job.status().message(), HasSubstr("record 3"));
}

TEST_F(RocksDbShardStoreTest, AStoreMadeBeforeTheLogFamilyGetsIt) {
  {
    // The families of a store made before the update log existed.
    rocksdb::DBOptions options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const char* name :
         {"default", "values", "optimizer", "clocks", "meta"}) {
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(
        rocksdb::DB::Open(options, DbPath(), families, &handles, &db).ok());
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    }
    EXPECT_TRUE(db->Close().ok());
    delete db;
  }
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->AppendLog("job", 1, {"r1"}, false).ok());
}

TEST_F(RocksDbShardStoreTest, BatchOfBlocksAndClocksIsStoredTogether) {
  std::vector<std::vector<float>> values;
  values.reserve(8);
  for (int i = 0; i < 8; ++i) values.emplace_back(1024, static_cast<float>(i));
  {
    std::unique_ptr<RocksDbShardStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    ShardWrite write{.job_id = "job", .sync = true};
    for (int i = 0; i < 8; ++i) {
      write.blocks.push_back({.key = Key(0, i),
                              .values = values[i],
                              .optimizer_state = values[i],
                              .optimizer_step = i});
    }
    write.worker_clocks = {{0, 3}, {1, 3}, {2, 2}};
    ASSERT_TRUE(store->Write(write).ok());
  }
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(job->blocks[i].values, values[i]);
    EXPECT_EQ(job->blocks[i].optimizer_state, values[i]);
    EXPECT_EQ(job->blocks[i].optimizer_step, i);
  }
  EXPECT_THAT(job->worker_clocks,
              ElementsAre(Pair(0, 3), Pair(1, 3), Pair(2, 2)));
}

TEST_F(RocksDbShardStoreTest, OpenOnRegularFileFailsNamingThePath) {
  const std::string file = dir_.path() + "/not-a-dir";
  std::ofstream(file) << "hello";
  auto store = RocksDbShardStore::Open({.path = file});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(file));
  EXPECT_THAT(store.status().message(), HasSubstr("not a directory"));
}

TEST_F(RocksDbShardStoreTest, OpenWithoutCreateOnEmptyDirFails) {
  auto store = RocksDbShardStore::Open(
      {.path = dir_.path(), .create_if_missing = false});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr(dir_.path()));

  const std::string missing = dir_.path() + "/missing";
  store =
      RocksDbShardStore::Open({.path = missing, .create_if_missing = false});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr(missing));
  EXPECT_FALSE(fs::exists(missing));
}

TEST_F(RocksDbShardStoreTest, OpenWithoutCreateOnExistingDatabaseWorks) {
  StoreOneBlock();
  auto store =
      RocksDbShardStore::Open({.path = DbPath(), .create_if_missing = false});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Load("job-7").ok());
}

TEST_F(RocksDbShardStoreTest, OpenCreatesNestedDirectories) {
  const std::string path = dir_.path() + "/a/b/c";
  ASSERT_FALSE(fs::exists(dir_.path() + "/a"));
  auto store = RocksDbShardStore::Open({.path = path});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(fs::is_directory(path));
  // The database lives there (RocksDB's CURRENT file names its manifest).
  EXPECT_TRUE(fs::is_regular_file(path + "/CURRENT"));
}

TEST_F(RocksDbShardStoreTest, OpenWithEmptyPathIsInvalid) {
  EXPECT_EQ(RocksDbShardStore::Open({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RocksDbShardStoreTest, SecondOpenOfTheSameDatabaseIsUnavailable) {
  std::unique_ptr<RocksDbShardStore> first = OpenStore();
  ASSERT_NE(first, nullptr);
  auto second = RocksDbShardStore::Open({.path = DbPath()});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(DbPath()));
}

TEST_F(RocksDbShardStoreTest, MalformedValuesAreDataLoss) {
  StoreOneBlock();
  PutRaw("values", RawBlockKey("job-7", Key(1, 3)), "abc");  // 3 bytes.
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job-7");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(job.status().message(), HasSubstr("job-7"));
  EXPECT_THAT(job.status().message(), HasSubstr("tensor 1, block 3"));
}

TEST_F(RocksDbShardStoreTest, RowsRecordWithoutItsBucketIsDataLoss) {
  StoreOneBlock();
  PutRaw("values", RawBlockKey("job-7", BucketKey(1, 3)) + "r", "rows");
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job-7");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(job.status().message(), HasSubstr("rows record"));
}

TEST_F(RocksDbShardStoreTest, MalformedOptimizerRecordIsDataLoss) {
  StoreOneBlock();
  PutRaw("optimizer", RawBlockKey("job-7", Key(1, 3)), "short");
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job-7");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(job.status().message(), HasSubstr("job-7"));
}

TEST_F(RocksDbShardStoreTest, OptimizerRecordWithoutValuesIsDataLoss) {
  StoreOneBlock();
  PutRaw("optimizer", RawBlockKey("job-7", Key(2, 0)), std::string(8, '\0'));
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job-7");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(job.status().message(), HasSubstr("tensor 2, block 0"));
}

TEST_F(RocksDbShardStoreTest, MalformedClockIsDataLoss) {
  StoreOneBlock();
  std::string key = "job-7";
  key.push_back('\0');
  key.append(std::string("\0\0\0\5", 4));  // Worker 5.
  PutRaw("clocks", key, "1234");           // 4 bytes, not 8.
  std::unique_ptr<RocksDbShardStore> store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StoredJob> job = store->Load("job-7");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(job.status().message(), HasSubstr("worker 5"));
}

TEST_F(RocksDbShardStoreTest, WriteLatencyObserverSeesEveryWrite) {
  std::atomic<int> calls = 0;
  auto store = RocksDbShardStore::Open(
      {.path = DbPath(), .on_write_latency = [&calls](double seconds) {
         EXPECT_GE(seconds, 0.0);
         ++calls;
       }});
  ASSERT_TRUE(store.ok()) << store.status();
  ShardWrite write{.job_id = "job"};
  write.worker_clocks = {{0, 1}};
  ASSERT_TRUE((*store)->Write(write).ok());
  ASSERT_TRUE((*store)->Write(write).ok());
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace ps::shard_store_test

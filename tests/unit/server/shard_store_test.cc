// One suite run against every ShardStore (so that the in-memory and RocksDB
// stores behave alike), plus RocksDB-only tests of durability, opening errors
// and corrupted data.
#include "server/shard_store.h"

#include <rocksdb/db.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/memory_shard_store.h"
#include "server/rocksdb_shard_store.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

// A fresh directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (fs::temp_directory_path() / "ps_shard_store_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code error;
    fs::remove_all(path_, error);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Makes MemoryShardStores for the typed suite.
class MemoryFactory {
 public:
  std::unique_ptr<ShardStore> Make() { return MemoryShardStore::Create(); }
};

// Makes RocksDbShardStores in a fresh temporary directory per test.
class RocksDbFactory {
 public:
  std::unique_ptr<ShardStore> Make() {
    auto store = RocksDbShardStore::Open({.path = dir_.path() + "/db"});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

 private:
  TempDir dir_;
};

// Block keys: (tensor_index << 32) | block_index.
constexpr uint64_t Key(uint64_t tensor, uint64_t block) {
  return (tensor << 32) | block;
}

template <typename Factory>
class ShardStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    store_ = factory_.Make();
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override { store_.reset(); }

  Factory factory_;
  std::unique_ptr<ShardStore> store_;
};

using StoreFactories = testing::Types<MemoryFactory, RocksDbFactory>;
class FactoryNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, MemoryFactory>) return "Memory";
    return "RocksDb";
  }
};
TYPED_TEST_SUITE(ShardStoreTest, StoreFactories, FactoryNames);

TYPED_TEST(ShardStoreTest, WriteThenLoadRoundTrips) {
  const std::vector<float> values0 = {1.5f, -2.25f, 3.0f};
  const std::vector<float> state0 = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  const std::vector<float> values1 = {7.0f};
  const std::vector<float> state1 = {8.0f, 9.0f};
  ShardWrite write{.job_id = "job"};
  write.blocks.push_back({.key = Key(0, 0),
                          .values = values0,
                          .optimizer_state = state0,
                          .optimizer_step = 3});
  write.blocks.push_back({.key = Key(1, 2),
                          .values = values1,
                          .optimizer_state = state1,
                          .optimizer_step = 1});
  write.worker_clocks = {{0, 4}, {2, 5}};
  write.sync = true;
  ASSERT_TRUE(this->store_->Write(write).ok());

  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->meta, "");
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_EQ(job->blocks[0].key, Key(0, 0));
  EXPECT_EQ(job->blocks[0].values, values0);
  EXPECT_EQ(job->blocks[0].optimizer_state, state0);
  EXPECT_EQ(job->blocks[0].optimizer_step, 3);
  EXPECT_EQ(job->blocks[1].key, Key(1, 2));
  EXPECT_EQ(job->blocks[1].values, values1);
  EXPECT_EQ(job->blocks[1].optimizer_state, state1);
  EXPECT_EQ(job->blocks[1].optimizer_step, 1);
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, 4), Pair(2, 5)));
}

TYPED_TEST(ShardStoreTest, BlocksLoadInKeyOrder) {
  const std::vector<float> v = {1.0f};
  const std::vector<uint64_t> keys = {Key(2, 0), Key(0, 7), Key(1, 0),
                                      Key(0, 256), Key(0xffffffff, 1)};
  ShardWrite write{.job_id = "job"};
  for (uint64_t key : keys) write.blocks.push_back({.key = key, .values = v});
  ASSERT_TRUE(this->store_->Write(write).ok());

  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<uint64_t> loaded;
  for (const StoredBlock& block : job->blocks) loaded.push_back(block.key);
  EXPECT_THAT(loaded, ElementsAre(Key(0, 7), Key(0, 256), Key(1, 0), Key(2, 0),
                                  Key(0xffffffff, 1)));
}

TYPED_TEST(ShardStoreTest, BucketRowsRoundTripAndAreReplaced) {
  // Opaque bytes with a NUL and a byte of each high value.
  const std::string rows("\x01\x00rows\xff\x80", 8);
  const std::vector<float> dense = {1.0f, 2.0f};
  ShardWrite write{.job_id = "job"};
  write.blocks.push_back({.key = Key(0, 1), .values = dense});
  write.blocks.push_back({.key = BucketKey(3, 5), .rows = rows});
  write.blocks.push_back({.key = BucketKey(3, 6), .optimizer_step = 2});
  ASSERT_TRUE(this->store_->Write(write).ok());

  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 3u);
  EXPECT_EQ(job->blocks[0].values, dense);
  EXPECT_EQ(job->blocks[0].rows, "");
  EXPECT_EQ(job->blocks[1].key, BucketKey(3, 5));
  EXPECT_TRUE(job->blocks[1].values.empty());
  EXPECT_EQ(job->blocks[1].rows, rows);
  EXPECT_EQ(job->blocks[2].key, BucketKey(3, 6));
  EXPECT_EQ(job->blocks[2].rows, "");
  EXPECT_EQ(job->blocks[2].optimizer_step, 2);

  // A later write of the bucket replaces its rows; empty rows clear them.
  ShardWrite second{.job_id = "job"};
  second.blocks.push_back({.key = BucketKey(3, 5)});
  second.blocks.push_back({.key = BucketKey(3, 6), .rows = "new"});
  ASSERT_TRUE(this->store_->Write(second).ok());
  job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 3u);
  EXPECT_EQ(job->blocks[1].rows, "");
  EXPECT_EQ(job->blocks[2].rows, "new");
}

TYPED_TEST(ShardStoreTest, RowsOnADenseKeyAreInvalid) {
  ShardWrite write{.job_id = "job"};
  write.blocks.push_back({.key = Key(0, 1), .rows = "x"});
  EXPECT_EQ(this->store_->Write(write).code(),
            absl::StatusCode::kInvalidArgument);
}

TYPED_TEST(ShardStoreTest, LaterWritesReplaceEarlierOnes) {
  const std::vector<float> old_values = {1.0f, 2.0f, 3.0f};
  const std::vector<float> old_state = {4.0f, 5.0f, 6.0f};
  ShardWrite first{.job_id = "job"};
  first.blocks.push_back({.key = Key(0, 1),
                          .values = old_values,
                          .optimizer_state = old_state,
                          .optimizer_step = 1});
  first.blocks.push_back({.key = Key(0, 2), .values = old_values});
  first.worker_clocks = {{0, 1}, {1, 1}};
  ASSERT_TRUE(this->store_->Write(first).ok());

  const std::vector<float> new_values = {9.0f, 8.0f};
  ShardWrite second{.job_id = "job"};
  second.blocks.push_back(
      {.key = Key(0, 1), .values = new_values, .optimizer_step = 2});
  second.worker_clocks = {{1, 2}};
  ASSERT_TRUE(this->store_->Write(second).ok());

  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_EQ(job->blocks[0].key, Key(0, 1));
  EXPECT_EQ(job->blocks[0].values, new_values);
  EXPECT_THAT(job->blocks[0].optimizer_state, IsEmpty());
  EXPECT_EQ(job->blocks[0].optimizer_step, 2);
  EXPECT_EQ(job->blocks[1].values, old_values);  // Untouched.
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, 1), Pair(1, 2)));
}

TYPED_TEST(ShardStoreTest, JobsDoNotSeeEachOthersData) {
  // "job-1" is a prefix of "job-10": their keys must not mix.
  const std::vector<float> a = {1.0f};
  const std::vector<float> b = {2.0f, 2.0f};
  for (const auto& [id, values, clock] :
       {std::tuple{"job-1", &a, 10}, std::tuple{"job-10", &b, 20},
        std::tuple{"job-", &b, 30}}) {
    ShardWrite write{.job_id = id};
    write.blocks.push_back({.key = Key(0, 0), .values = *values});
    write.worker_clocks = {{0, clock}};
    ASSERT_TRUE(this->store_->Write(write).ok());
    ASSERT_TRUE(
        this->store_->PutJobMeta(id, absl::StrCat("meta of ", id)).ok());
  }

  absl::StatusOr<StoredJob> job1 = this->store_->Load("job-1");
  ASSERT_TRUE(job1.ok()) << job1.status();
  EXPECT_EQ(job1->meta, "meta of job-1");
  ASSERT_EQ(job1->blocks.size(), 1u);
  EXPECT_EQ(job1->blocks[0].values, a);
  EXPECT_THAT(job1->worker_clocks, ElementsAre(Pair(0, 10)));

  absl::StatusOr<StoredJob> job10 = this->store_->Load("job-10");
  ASSERT_TRUE(job10.ok()) << job10.status();
  EXPECT_EQ(job10->meta, "meta of job-10");
  ASSERT_EQ(job10->blocks.size(), 1u);
  EXPECT_EQ(job10->blocks[0].values, b);
  EXPECT_THAT(job10->worker_clocks, ElementsAre(Pair(0, 20)));

  // Deleting one leaves its neighbours intact.
  ASSERT_TRUE(this->store_->DeleteJob("job-1").ok());
  EXPECT_EQ(this->store_->Load("job-1").status().code(),
            absl::StatusCode::kNotFound);
  job10 = this->store_->Load("job-10");
  ASSERT_TRUE(job10.ok()) << job10.status();
  EXPECT_EQ(job10->blocks.size(), 1u);
  EXPECT_THAT(job10->worker_clocks, ElementsAre(Pair(0, 20)));
  absl::StatusOr<StoredJob> prefix = this->store_->Load("job-");
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_THAT(prefix->worker_clocks, ElementsAre(Pair(0, 30)));
}

TYPED_TEST(ShardStoreTest, DeleteJobRemovesEverything) {
  const std::vector<float> v = {1.0f, 2.0f};
  ShardWrite write{.job_id = "job"};
  write.blocks.push_back({.key = 5, .values = v, .optimizer_state = v});
  write.worker_clocks = {{3, 7}};
  ASSERT_TRUE(this->store_->Write(write).ok());
  ASSERT_TRUE(this->store_->PutJobMeta("job", "assignment").ok());

  ASSERT_TRUE(this->store_->DeleteJob("job").ok());
  EXPECT_EQ(this->store_->Load("job").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<std::string>> jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, IsEmpty());
  // Deleting again, or deleting a job never stored, is not an error.
  EXPECT_TRUE(this->store_->DeleteJob("job").ok());
  EXPECT_TRUE(this->store_->DeleteJob("never-stored").ok());

  // The job can be written again from scratch.
  ShardWrite again{.job_id = "job"};
  again.worker_clocks = {{0, 1}};
  ASSERT_TRUE(this->store_->Write(again).ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->blocks, IsEmpty());
  EXPECT_EQ(job->meta, "");
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, 1)));
}

TYPED_TEST(ShardStoreTest, LogRecordsLoadInOrderAfterTheSnapshot) {
  ShardWrite snapshot{.job_id = "job"};
  snapshot.worker_clocks = {{0, 2}};
  ASSERT_TRUE(this->store_->Write(snapshot).ok());
  ASSERT_TRUE(this->store_->AppendLog("job", 1, {"a", "b"}, false).ok());
  ASSERT_TRUE(this->store_->AppendLog("job", 3, {"c"}, true).ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 0);
  EXPECT_THAT(job->log, ElementsAre("a", "b", "c"));
  // Records are opaque bytes: '\0' and empty records round-trip too.
  ASSERT_TRUE(
      this->store_->AppendLog("job", 4, {std::string("x\0y", 3), ""}, false)
          .ok());
  job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->log, ElementsAre("a", "b", "c", std::string("x\0y", 3), ""));
}

TYPED_TEST(ShardStoreTest, ASnapshotDropsTheLogRecordsItCovers) {
  const std::vector<float> v = {1.0f, 2.0f};
  ASSERT_TRUE(
      this->store_->AppendLog("job", 1, {"r1", "r2", "r3", "r4", "r5"}, false)
          .ok());
  ShardWrite snapshot{.job_id = "job", .log_sequence = 3};
  snapshot.blocks.push_back({.key = 5, .values = v, .optimizer_state = v});
  snapshot.worker_clocks = {{0, 3}};
  ASSERT_TRUE(this->store_->Write(snapshot).ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 3);
  EXPECT_THAT(job->log, ElementsAre("r4", "r5"));
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, 3)));

  // A snapshot of everything logged leaves an empty log; appending goes on.
  snapshot.log_sequence = 5;
  ASSERT_TRUE(this->store_->Write(snapshot).ok());
  ASSERT_TRUE(this->store_->AppendLog("job", 6, {"r6"}, false).ok());
  job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->log_sequence, 5);
  EXPECT_THAT(job->log, ElementsAre("r6"));
}

TYPED_TEST(ShardStoreTest, DeleteJobRemovesItsLogAndAJobWithOnlyALogIsListed) {
  ASSERT_TRUE(this->store_->AppendLog("logged", 1, {"r1"}, false).ok());
  absl::StatusOr<std::vector<std::string>> jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, ElementsAre("logged"));
  ASSERT_TRUE(this->store_->DeleteJob("logged").ok());
  EXPECT_EQ(this->store_->Load("logged").status().code(),
            absl::StatusCode::kNotFound);
  jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, IsEmpty());
}

TYPED_TEST(ShardStoreTest, RefusesBadLogSequences) {
  absl::Status status = this->store_->AppendLog("job", 0, {"r"}, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("first_sequence"));
  EXPECT_EQ(this->store_->AppendLog("", 1, {"r"}, false).code(),
            absl::StatusCode::kInvalidArgument);
  status = this->store_->Write({.job_id = "job", .log_sequence = -1});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("log_sequence"));
  EXPECT_EQ(this->store_->Load("job").status().code(),
            absl::StatusCode::kNotFound);
}

TYPED_TEST(ShardStoreTest, ListJobsIsSortedAndCountsAnyKindOfState) {
  absl::StatusOr<std::vector<std::string>> jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, IsEmpty());

  const std::vector<float> v = {1.0f};
  ShardWrite blocks_only{.job_id = "b-blocks"};
  blocks_only.blocks.push_back({.key = 1, .values = v});
  ASSERT_TRUE(this->store_->Write(blocks_only).ok());
  ShardWrite clocks_only{.job_id = "a-clocks"};
  clocks_only.worker_clocks = {{0, 1}};
  ASSERT_TRUE(this->store_->Write(clocks_only).ok());
  ASSERT_TRUE(this->store_->PutJobMeta("c-meta", "").ok());
  ASSERT_TRUE(this->store_->PutJobMeta("b", "x").ok());
  // A write with nothing in it stores nothing.
  ASSERT_TRUE(this->store_->Write({.job_id = "d-empty"}).ok());

  jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, ElementsAre("a-clocks", "b", "b-blocks", "c-meta"));
  EXPECT_EQ(this->store_->Load("d-empty").status().code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(this->store_->DeleteJob("b").ok());
  jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, ElementsAre("a-clocks", "b-blocks", "c-meta"));
}

TYPED_TEST(ShardStoreTest, LoadOfUnknownJobIsNotFound) {
  absl::StatusOr<StoredJob> job = this->store_->Load("nobody");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("nobody"));
}

TYPED_TEST(ShardStoreTest, MetaRoundTripsAndIsReplaced) {
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(this->store_->PutJobMeta("job", binary).ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->meta, binary);
  EXPECT_THAT(job->blocks, IsEmpty());
  EXPECT_THAT(job->worker_clocks, IsEmpty());

  ASSERT_TRUE(this->store_->PutJobMeta("job", "second").ok());
  job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->meta, "second");

  // An empty meta still marks the job as stored.
  ASSERT_TRUE(this->store_->PutJobMeta("empty", "").ok());
  job = this->store_->Load("empty");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->meta, "");
}

TYPED_TEST(ShardStoreTest, EmptyOptimizerStateAndEmptyValues) {
  const std::vector<float> v = {1.0f, 2.0f, 3.0f};
  ShardWrite write{.job_id = "job"};
  write.blocks.push_back({.key = 1, .values = v, .optimizer_step = 7});
  write.blocks.push_back({.key = 2});  // Nothing at all: still a block.
  ASSERT_TRUE(this->store_->Write(write).ok());

  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 2u);
  EXPECT_EQ(job->blocks[0].values, v);
  EXPECT_THAT(job->blocks[0].optimizer_state, IsEmpty());
  EXPECT_EQ(job->blocks[0].optimizer_step, 7);
  EXPECT_THAT(job->blocks[1].values, IsEmpty());
  EXPECT_THAT(job->blocks[1].optimizer_state, IsEmpty());
  EXPECT_EQ(job->blocks[1].optimizer_step, 0);
}

TYPED_TEST(ShardStoreTest, ExtremeClocksAndWorkerIndicesRoundTrip) {
  ShardWrite write{.job_id = "job"};
  write.worker_clocks = {{0, -1}, {1, INT64_MAX}, {INT32_MAX, INT64_MIN}};
  ASSERT_TRUE(this->store_->Write(write).ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, -1), Pair(1, INT64_MAX),
                                              Pair(INT32_MAX, INT64_MIN)));
}

TYPED_TEST(ShardStoreTest, RefusesInvalidJobIdsAndWorkers) {
  const std::string with_nul("a\0b", 3);
  EXPECT_EQ(this->store_->Write({.job_id = ""}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(this->store_->Write({.job_id = with_nul}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(this->store_->PutJobMeta("", "m").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(this->store_->Load(with_nul).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(this->store_->DeleteJob("").code(),
            absl::StatusCode::kInvalidArgument);

  // A bad worker index fails the whole write: nothing of it is stored.
  const std::vector<float> v = {1.0f};
  ShardWrite write{.job_id = "job"};
  write.blocks.push_back({.key = 1, .values = v});
  write.worker_clocks = {{0, 1}, {-1, 1}};
  absl::Status status = this->store_->Write(write);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("worker"));
  EXPECT_EQ(this->store_->Load("job").status().code(),
            absl::StatusCode::kNotFound);
}

TYPED_TEST(ShardStoreTest, ConcurrentWritersToDifferentBlocks) {
  constexpr int kThreads = 4;
  constexpr int kWritesPerThread = 50;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int i = 0; i < kWritesPerThread; ++i) {
        const std::vector<float> values(16, static_cast<float>(i));
        ShardWrite write{.job_id = "job"};
        write.blocks.push_back(
            {.key = Key(t, 0), .values = values, .optimizer_step = i + 1});
        write.worker_clocks = {{t, i + 1}};
        EXPECT_TRUE(this->store_->Write(write).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), static_cast<size_t>(kThreads));
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(job->blocks[t].optimizer_step, kWritesPerThread);
    EXPECT_EQ(job->blocks[t].values,
              std::vector<float>(16, kWritesPerThread - 1.0f));
    EXPECT_EQ(job->worker_clocks.at(t), kWritesPerThread);
  }
}

// RocksDB only: durability, opening errors, corrupted data.
class RocksDbShardStoreTest : public testing::Test {
 protected:
  std::string DbPath() const { return dir_.path() + "/db"; }

  std::unique_ptr<RocksDbShardStore> OpenStore() {
    auto store = RocksDbShardStore::Open({.path = DbPath()});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Puts a raw key and value into one column family, with the store closed,
  // through a second RocksDB handle.
  void PutRaw(const std::string& family, const std::string& key,
              const std::string& value) {
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const char* name :
         {"default", "values", "optimizer", "clocks", "meta", "log"}) {
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::Status status = rocksdb::DB::Open(rocksdb::DBOptions(), DbPath(),
                                               families, &handles, &db);
    ASSERT_TRUE(status.ok()) << status.ToString();
    int index = 0;
    for (size_t i = 0; i < families.size(); ++i) {
      if (families[i].name == family) index = i;
    }
    ASSERT_NE(index, 0) << family;
    status = db->Put(rocksdb::WriteOptions(), handles[index], key, value);
    EXPECT_TRUE(status.ok()) << status.ToString();
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    }
    EXPECT_TRUE(db->Close().ok());
    delete db;
  }

  // The documented key of a block: job '\0' key (8 bytes, big-endian).
  static std::string RawBlockKey(const std::string& job, uint64_t key) {
    std::string out = job;
    out.push_back('\0');
    for (int shift = 56; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((key >> shift) & 0xff));
    }
    return out;
  }

  // Stores one well-formed block and clock for "job-7", then closes.
  void StoreOneBlock() {
    std::unique_ptr<RocksDbShardStore> store = OpenStore();
    ASSERT_NE(store, nullptr);
    const std::vector<float> v = {1.0f, 2.0f};
    ShardWrite write{.job_id = "job-7"};
    write.blocks.push_back({.key = Key(1, 3), .values = v});
    write.worker_clocks = {{0, 1}};
    ASSERT_TRUE(store->Write(write).ok());
  }

  TempDir dir_;
};

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
}  // namespace ps

// ShardStore (MemoryShardStore and RocksDbShardStore, one typed suite):
// blocks, bucket rows, clocks, optimizer state and meta round trip, later
// writes replace earlier ones, jobs are separate, deletion, listing, invalid
// ids, and concurrent writers.
#include "server/shard_store.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/server/shard_store_fixture.h"

namespace ps::shard_store_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

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

// A server move's deletion (ShardStore::DropJob): everything goes as with
// DeleteJob (snapshot, meta, log), and a state written after it is the
// only one Load sees.
TYPED_TEST(ShardStoreTest, DropJobRemovesEverythingAndTheJobIsWrittenAnew) {
  const std::vector<float> v = {1.0f, 2.0f};
  ShardWrite write{.job_id = "job"};
  write.blocks.push_back({.key = 5, .values = v, .optimizer_state = v});
  write.blocks.push_back({.key = 6, .values = v});
  write.worker_clocks = {{0, 7}};
  write.log_sequence = 2;
  ASSERT_TRUE(this->store_->Write(write).ok());
  ASSERT_TRUE(this->store_->AppendLog("job", 3, {"r3", "r4"}, true).ok());
  ASSERT_TRUE(this->store_->PutJobMeta("job", "old map").ok());
  ShardWrite neighbour{.job_id = "job~map2"};
  neighbour.worker_clocks = {{0, 9}};
  ASSERT_TRUE(this->store_->Write(neighbour).ok());

  ASSERT_TRUE(this->store_->DropJob("job").ok());
  EXPECT_EQ(this->store_->Load("job").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<std::string>> jobs = this->store_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, ElementsAre("job~map2"));
  EXPECT_TRUE(this->store_->DropJob("never-stored").ok());

  // Written anew (a moved job's first snapshot, then its metadata): no
  // block, clock or log record of before.
  const std::vector<float> w = {3.0f};
  ShardWrite again{.job_id = "job", .sync = true};
  again.blocks.push_back({.key = 6, .values = w});
  again.worker_clocks = {{0, 9}};
  ASSERT_TRUE(this->store_->Write(again).ok());
  ASSERT_TRUE(this->store_->PutJobMeta("job", "new map").ok());
  absl::StatusOr<StoredJob> job = this->store_->Load("job");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->blocks.size(), 1u);
  EXPECT_EQ(job->blocks[0].key, 6u);
  EXPECT_THAT(job->blocks[0].values, ElementsAre(3.0f));
  EXPECT_EQ(job->meta, "new map");
  EXPECT_THAT(job->worker_clocks, ElementsAre(Pair(0, 9)));
  EXPECT_EQ(job->log_sequence, 0);
  EXPECT_THAT(job->log, IsEmpty());
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

}  // namespace
}  // namespace ps::shard_store_test

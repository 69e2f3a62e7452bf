// A lost server's place hosted by a surviving server (server/hosted_places.h,
// server/parameter_manager_hosted.cc): the hosted place's store ids, the
// store that renames the job's id (its drop is the base store's DropJob of
// the place's id only), the import of a lost place into it (and from a
// hosted id), and a ParameterManager serving two places of one job, each
// with its own clocks, routed by the request's `place`.
#include "server/hosted_places.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/memory_shard_store.h"
#include "server/parameter_manager.h"
#include "server/rebuild_import.h"
#include "server/rocksdb_shard_store.h"
#include "server/server_job.h"
#include "server/server_metrics.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(HostedPlacesTest, StoreIdsNameTheJobAndThePlace) {
  EXPECT_EQ(HostedStoreId("job-3", 2), "job-3~place2");
  EXPECT_TRUE(IsHostedStoreId("job-3~place2"));
  EXPECT_EQ(JobOfHostedStoreId("job-3~place2"), "job-3");
  EXPECT_FALSE(IsHostedStoreId("job-3"));
  EXPECT_FALSE(IsHostedStoreId("job-3~map4"));
  EXPECT_FALSE(IsHostedStoreId("~place1"));
  EXPECT_EQ(JobOfHostedStoreId("job-3~placex"), "job-3~placex");
}

TEST(HostedPlacesTest, TheStoreRenamesTheJobsIdOnly) {
  auto base = MemoryShardStore::Create();
  HostedPlaceStore hosted(base.get(), "job-3", 1);
  std::vector<float> values = {1.0f, 2.0f};
  ShardWrite write{.job_id = "job-3"};
  write.blocks.push_back({.key = 4, .values = values});
  write.worker_clocks = {{0, 5}};
  ASSERT_TRUE(hosted.Write(write).ok());
  ASSERT_TRUE(hosted.PutJobMeta("job-3", "meta").ok());
  ASSERT_TRUE(hosted.AppendLog("job-3", 1, {"r1"}, false).ok());
  ASSERT_TRUE(base->PutJobMeta("job-3", "own").ok());
  auto under = base->Load("job-3~place1");
  ASSERT_TRUE(under.ok()) << under.status();
  EXPECT_EQ(under->meta, "meta");
  EXPECT_EQ(under->worker_clocks.at(0), 5);
  EXPECT_EQ(under->log, std::vector<std::string>{"r1"});
  EXPECT_EQ(hosted.Load("job-3")->meta, "meta");
  EXPECT_EQ(base->Load("job-3")->meta, "own");  // The server's own place.
  EXPECT_THAT(*hosted.ListJobs(), ElementsAre("job-3"));
  EXPECT_EQ(hosted.PutJobMeta("job-4", "x").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(hosted.DeleteJob("job-3").ok());
  EXPECT_TRUE(absl::IsNotFound(base->Load("job-3~place1").status()));
  EXPECT_TRUE(base->Load("job-3").ok());
}

class HostedImportTest : public ::testing::Test {
 protected:
  testing::ScopedTempDir dir_{"hosted_import"};
};

TEST_F(HostedImportTest, ALostPlaceImportsIntoItsHostedIdAndFromOne) {
  // Place 0 of a one-server job, lost; its directory holds it under the
  // job's id (its own place) or under a hosted id (it hosted the place).
  const v1::Assignment old = testing::TinyAssignment(
      "job-7", 4, 3, 5, 2, "10.0.0.1:7000", [](v1::JobSpec*) {});
  for (const bool from_hosted : {false, true}) {
    SCOPED_TRACE(from_hosted);
    const std::string lost_dir =
        absl::StrCat(dir_.path(), "/lost", from_hosted ? "h" : "");
    {
      auto lost = RocksDbShardStore::Open({.path = lost_dir});
      ASSERT_TRUE(lost.ok()) << lost.status();
      HostedPlaceStore as_hosted(lost->get(), "job-7", 0);
      ShardStore* into =
          from_hosted ? static_cast<ShardStore*>(&as_hosted) : lost->get();
      std::vector<float> values = {1.5f};
      ShardWrite write{.job_id = "job-7", .log_sequence = 2};
      write.blocks.push_back({.key = 1, .values = values});
      write.worker_clocks = {{0, 8}, {1, 7}};
      ASSERT_TRUE(into->Write(write).ok());
      ASSERT_TRUE(into->PutJobMeta("job-7", StoredJobMeta(old)).ok());
    }
    v1::Assignment rebuilt = old;
    rebuilt.mutable_shard_map()->set_version(2);
    rebuilt.mutable_shard_map()->set_servers(0, "10.0.0.9:7000");
    rebuilt.set_rebuild_from_data_dir(lost_dir);
    rebuilt.set_rebuild_map_version(2);
    rebuilt.set_rebuild_from_hosted(from_hosted);
    rebuilt.set_hosted(true);
    auto base = MemoryShardStore::Create();
    HostedPlaceStore mine(base.get(), "job-7", 0);
    ASSERT_TRUE(ImportRebuiltPlace(rebuilt, &mine, &OpenLostStore).ok());
    auto got = base->Load("job-7~place0");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->meta, StoredJobMeta(WithoutRebuild(rebuilt)));
    EXPECT_EQ(got->worker_clocks, (std::map<int32_t, int64_t>{{0, 8}, {1, 7}}));
    EXPECT_EQ(got->log_sequence, 2);
    EXPECT_TRUE(absl::IsNotFound(base->Load("job-7").status()));
  }
}

// A real store that records which deletion each id reached it by, so a test
// tells DropJob from the default's DeleteJob; everything else forwarded.
class DeletionRecordingStore : public ShardStore {
 public:
  explicit DeletionRecordingStore(ShardStore* base) : base_(base) {}
  absl::Status Write(const ShardWrite& write) override {
    return base_->Write(write);
  }
  absl::Status AppendLog(const std::string& job_id, int64_t first_sequence,
                         const std::vector<std::string>& records,
                         bool sync) override {
    return base_->AppendLog(job_id, first_sequence, records, sync);
  }
  absl::Status PutJobMeta(const std::string& job_id,
                          const std::string& meta) override {
    return base_->PutJobMeta(job_id, meta);
  }
  absl::StatusOr<StoredJob> Load(const std::string& job_id) override {
    return base_->Load(job_id);
  }
  absl::StatusOr<std::vector<std::string>> ListJobs() override {
    return base_->ListJobs();
  }
  absl::Status DeleteJob(const std::string& job_id) override {
    deleted.push_back(job_id);
    return base_->DeleteJob(job_id);
  }
  absl::Status DropJob(const std::string& job_id) override {
    dropped.push_back(job_id);
    return base_->DropJob(job_id);
  }
  std::vector<std::string> deleted;
  std::vector<std::string> dropped;

 private:
  ShardStore* const base_;
};

TEST_F(HostedImportTest, ADropTakesTheHostedPlaceOnlyAndWaitsForNoCompaction) {
  auto rocksdb = RocksDbShardStore::Open({.path = dir_.File("store")});
  ASSERT_TRUE(rocksdb.ok()) << rocksdb.status();
  DeletionRecordingStore base(rocksdb->get());
  HostedPlaceStore place1(&base, "job-3", 1);
  HostedPlaceStore place2(&base, "job-3", 2);
  // The server's own place (0) and two places it hosts, each with blocks,
  // clocks, metadata and a log.
  std::vector<ShardStore*> places = {&base, &place1, &place2};
  for (int p = 0; p < 3; ++p) {
    std::vector<float> values = {1.0f * p, 2.0f};
    ShardWrite write{.job_id = "job-3", .log_sequence = 1};
    write.blocks.push_back({.key = 4, .values = values});
    write.worker_clocks = {{0, 5 + p}};
    ASSERT_TRUE(places[p]->Write(write).ok());
    ASSERT_TRUE(places[p]->PutJobMeta("job-3", absl::StrCat("m", p)).ok());
    ASSERT_TRUE(places[p]->AppendLog("job-3", 2, {"r"}, false).ok());
  }

  ASSERT_TRUE(place1.DropJob("job-3").ok());
  EXPECT_THAT(base.dropped, ElementsAre("job-3~place1"));
  EXPECT_THAT(base.deleted, IsEmpty());
  EXPECT_TRUE(absl::IsNotFound(place1.Load("job-3").status()));
  EXPECT_THAT(*base.ListJobs(), ElementsAre("job-3", "job-3~place2"));
  for (int p : {0, 2}) {
    auto kept = places[p]->Load("job-3");
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(kept->meta, absl::StrCat("m", p));
    ASSERT_EQ(kept->blocks.size(), 1u);
    EXPECT_EQ(kept->blocks[0].values, (std::vector<float>{1.0f * p, 2.0f}));
    EXPECT_EQ(kept->worker_clocks.at(0), 5 + p);
    EXPECT_EQ(kept->log, std::vector<std::string>{"r"});
  }
  EXPECT_EQ(place1.DropJob("job-4").code(), absl::StatusCode::kInvalidArgument);
}

// A job on two places, both on this server: its own (0) and a hosted one.
v1::Assignment TwoPlaces(int index) {
  v1::Assignment a = testing::TinyAssignment(
      "job-h", 4, 3, 5, 1, "127.0.0.1:1", [](v1::JobSpec* spec) {
        spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
        spec->set_durability(v1::WAL);
        spec->set_num_servers(2);
      });
  a.mutable_shard_map()->add_servers("127.0.0.1:1");
  for (int b = 0; b < a.shard_map().blocks_size(); ++b) {
    a.mutable_shard_map()->mutable_blocks(b)->set_server(b % 2);
  }
  a.set_index(index);
  a.set_hosted(index == 1);
  return a;
}

// Pushes one gradient of zeros for `block` at `clock`, naming `place`.
absl::StatusOr<v1::PushResponse> PushTo(ParameterManager& manager, int place,
                                        const v1::BlockPlacement& block,
                                        int64_t clock = 0) {
  v1::PushRequest push;
  push.set_job_id("job-h");
  push.set_clock(clock);
  push.set_map_version(1);
  push.set_place(place);
  v1::Block* g = push.add_gradients();
  g->set_key(block.key());
  g->set_data(std::string(block.num_elems() * sizeof(float), '\0'));
  absl::Notification done;
  absl::StatusOr<v1::PushResponse> result;
  manager.Push(push, [&](absl::StatusOr<v1::PushResponse> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

TEST(HostedPlacesManagerTest, TwoPlacesOfOneJobKeepTheirOwnClocks) {
  auto store = MemoryShardStore::Create();
  prometheus::Registry registry;
  ServerMetrics metrics(registry);
  ParameterManager manager(store.get(), &metrics);
  const v1::Assignment own = TwoPlaces(0);
  const v1::Assignment hosted = TwoPlaces(1);
  ASSERT_THAT(manager.SyncAssignments({own, hosted}), IsEmpty());
  const v1::BlockPlacement& of0 = own.shard_map().blocks(0);
  const v1::BlockPlacement& of1 = own.shard_map().blocks(1);

  // Place 1's push reaches the hosted place; again, it is a duplicate there.
  auto pushed = PushTo(manager, 1, of1);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_FALSE(pushed->duplicate());
  pushed = PushTo(manager, 1, of1);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_TRUE(pushed->duplicate());
  // The own place's clock is its own: the same clock is new there.
  pushed = PushTo(manager, 0, of0);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_FALSE(pushed->duplicate());
  // A place answers for its own units only.
  EXPECT_FALSE(PushTo(manager, 1, of0, /*clock=*/1).ok());

  // One job stored, under two ids.
  EXPECT_THAT(*manager.StoredJobs(), ElementsAre("job-h"));
  EXPECT_THAT(*store->ListJobs(), ElementsAre("job-h", "job-h~place1"));

  // The hosted place unassigned: a request for it waits (retry), the own
  // place still serves.
  ASSERT_THAT(manager.SyncAssignments({own}), IsEmpty());
  EXPECT_EQ(PushTo(manager, 1, of1).status().code(),
            absl::StatusCode::kUnavailable);
  // The job ended: both ids are deleted.
  ASSERT_THAT(manager.SyncAssignments({}), IsEmpty());
  manager.DeleteEndedJobs({"job-h"});
  for (int i = 0; i < 200 && !store->ListJobs()->empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(*store->ListJobs(), IsEmpty());
  manager.Shutdown();
}

}  // namespace
}  // namespace ps

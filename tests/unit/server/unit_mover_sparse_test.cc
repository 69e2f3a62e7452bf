// A server move of a job with a sparse table (docs/sparse.md, "Moving
// buckets"), on the server's side without gRPC: the owner under map 1 takes
// pushes (some ids admitted, some still counted), stops at the move's
// boundary and exports its units (ServerJob::ExportUnits); the new owner's
// UnitMover copies the buckets through a fetch function, stores them synced
// under the staging id, and the job opened from the staged copy holds the
// same rows bit for bit (values, optimizer state, last-updated clocks,
// update counts, pending admission counts), also read back from the store
// as after a restart, and goes on as the owner would: the next push admits
// the same ids and gives the same rows. Against both stores, and again with
// a memory budget of a few rows (the rest in the tier on disk) on both
// sides.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/sparse_keys.h"
#include "gtest/gtest.h"
#include "server/server_job.h"
#include "server/unit_mover.h"
#include "tests/testing/server_job_store_fixture.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

constexpr char kJobId[] = "job-000007";
constexpr int kDim = 4;
constexpr int kBuckets = 8;

// An EXTERNAL model with one dense tensor and one sparse table (row-wise
// Adagrad, ids admitted at their second update). Map 1: one server holds
// everything. Map 2: server 0 keeps the dense blocks, server 1 takes every
// bucket.
v1::Assignment MakeAssignment(int index, int64_t version) {
  v1::Assignment a;
  a.set_job_id(kJobId);
  v1::JobSpec* spec = a.mutable_spec();
  *spec = testing::TinySparseSpec("move", kDim, kBuckets);
  v1::SparseTableSpec* table = spec->mutable_model()->mutable_sparse_tables(0);
  table->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(
      0.1f);
  table->mutable_admission()->set_min_count(2);
  spec->set_seed(5);
  spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.5f);
  spec->mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec->set_num_workers(1);
  spec->set_num_servers(1);
  ApplyJobSpecDefaults(spec);
  a.set_index(index);
  a.set_num_workers(1);
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(version);
  map->add_servers("localhost:1000");
  if (version > 1) map->add_servers("localhost:1001");
  testing::PlaceTinySparseJob(
      *spec, kBuckets, [&](uint32_t) { return version > 1 ? 1 : 0; }, map);
  return a;
}

// Map 1's assignment of server `index` with the move to map 2 in progress,
// its boundary at `boundary`.
v1::Assignment Moving(int index, int64_t boundary) {
  v1::Assignment a = MakeAssignment(index, 1);
  v1::ShardMapChange* change = a.mutable_map_change();
  change->set_version(2);
  change->set_reason("scale 1 -> 2 servers");
  change->set_boundary_set(true);
  change->set_boundary_clock(boundary);
  *change->mutable_shard_map() = MakeAssignment(index, 2).shard_map();
  return a;
}

v1::PushRequest MakePush(int64_t clock, int64_t map_version,
                         const std::vector<uint64_t>& ids, int salt) {
  v1::PushRequest push;
  push.set_job_id(kJobId);
  push.set_worker_index(0);
  push.set_clock(clock);
  push.set_map_version(map_version);
  std::vector<float> grads(ids.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] =
        0.01f * static_cast<float>((static_cast<size_t>(salt) * 17 + i) % 23) -
        0.1f;
  }
  v1::SparseRows* rows = push.add_sparse();
  rows->set_table(0);
  rows->set_keys(std::string(reinterpret_cast<const char*>(ids.data()),
                             ids.size() * sizeof(uint64_t)));
  rows->set_values(std::string(reinterpret_cast<const char*>(grads.data()),
                               grads.size() * sizeof(float)));
  return push;
}

// The non-empty buckets of a snapshot, by key: their encoded rows.
std::vector<std::pair<uint64_t, std::string>> Buckets(
    const std::vector<StoredBlock>& blocks) {
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const StoredBlock& b : blocks) {
    if (!b.rows.empty()) out.emplace_back(b.key, b.rows);
  }
  return out;
}

class UnitMoverSparseTest : public testing::ServerJobStoreFixture {
 protected:
  static int64_t Budget() {
    const std::string suite = ::testing::UnitTest::GetInstance()
                                  ->current_test_info()
                                  ->test_suite_name();
    return suite.rfind("Tiered", 0) == 0 ? 700 : 0;
  }

  std::unique_ptr<ServerJob> Open(const v1::Assignment& a, ShardStore* store,
                                  StoredJob* initial = nullptr) {
    ServerJobOptions options;
    options.sparse_memory_bytes = Budget();
    auto job = ServerJob::Open(a, store, &metrics_, options, initial);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }

  void Push(ServerJob& job, const v1::PushRequest& request) {
    absl::StatusOr<v1::PushResponse> out = absl::UnknownError("parked");
    job.Push(request, [&out](absl::StatusOr<v1::PushResponse> reply) {
      out = std::move(reply);
    });
    ASSERT_TRUE(job.Flush().ok());
    ASSERT_TRUE(out.ok()) << out.status();
  }
};

TEST_P(UnitMoverSparseTest, MovedBucketsHoldTheOwnersRowsBitForBit) {
  auto owner = Open(MakeAssignment(0, 1), store_.get());
  ASSERT_NE(owner, nullptr);
  // Ids 1..40 twice (admitted), 41..60 once (pending), over 3 clocks.
  std::vector<uint64_t> twice, once;
  for (uint64_t id = 1; id <= 40; ++id) twice.push_back(id);
  for (uint64_t id = 41; id <= 60; ++id) once.push_back(id);
  Push(*owner, MakePush(0, 1, twice, 0));
  Push(*owner, MakePush(1, 1, twice, 1));
  Push(*owner, MakePush(2, 1, once, 2));
  if (HasFatalFailure()) return;

  // The move stops at clock 3.
  EXPECT_EQ(owner->ApplyMapChange(Moving(0, 3)).frontier, 3);
  // The new owner, server 1, with a store of its own.
  auto theirs = MemoryShardStore::Create();
  int fetches = 0;
  {
    UnitMover mover(theirs.get(), [](const v1::FetchUnitsRequest&) {
      return absl::StatusOr<v1::FetchUnitsResponse>(
          absl::InternalError("server 1 owns nothing under map 1"));
    });
    mover.SetRemoteFetch(
        [&](const std::string& address, const v1::FetchUnitsRequest& request) {
          EXPECT_EQ(address, "localhost:1000");
          ++fetches;
          return owner->ExportUnits(request);
        });
    mover.Sync({Moving(1, 3)});
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (mover.StagedVersion(kJobId) != 2 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(mover.StagedVersion(kJobId), 2);
  }
  EXPECT_GE(fetches, 1);
  // A fresh mover (a restarted server) reads the copy from the store.
  UnitMover restarted(theirs.get(), nullptr);
  auto staged = restarted.Staged(kJobId, 2);
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_TRUE(staged->has_value());
  EXPECT_EQ((*staged)->blocks.size(), size_t{kBuckets});
  EXPECT_EQ((*staged)->worker_clocks.at(0), 3);

  auto moved = Open(MakeAssignment(1, 2), theirs.get(), &**staged);
  ASSERT_NE(moved, nullptr);
  restarted.Stop();
  const auto expected = Buckets(owner->SparseSnapshot());
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(Buckets(moved->SparseSnapshot()), expected);
  EXPECT_EQ(moved->SparseRowCount(), 40);

  // Both go on alike: the pending ids are admitted at their second update.
  owner->ApplyMapChange(MakeAssignment(0, 1));  // The owner's move ends.
  Push(*owner, MakePush(3, 1, once, 3));
  Push(*moved, MakePush(3, 2, once, 3));
  if (HasFatalFailure()) return;
  EXPECT_EQ(owner->SparseRowCount(), 60);
  EXPECT_EQ(Buckets(moved->SparseSnapshot()), Buckets(owner->SparseSnapshot()));
}

TEST_P(UnitMoverSparseTest, AnOwnerRefusesBucketsItDoesNotHold) {
  auto owner = Open(MakeAssignment(0, 1), store_.get());
  ASSERT_NE(owner, nullptr);
  owner->ApplyMapChange(Moving(0, 0));
  v1::FetchUnitsRequest request;
  request.set_job_id(kJobId);
  request.set_map_version(2);
  request.set_boundary_clock(0);
  request.add_keys(BucketKey(0, kBuckets));  // No such bucket.
  auto refused = owner->ExportUnits(request);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  // Buckets that never held a row move empty.
  request.clear_keys();
  request.add_keys(BucketKey(0, 1));
  auto empty = owner->ExportUnits(request);
  ASSERT_TRUE(empty.ok()) << empty.status();
  ASSERT_EQ(empty->units_size(), 1);
  EXPECT_TRUE(empty->units(0).rows().empty());
  EXPECT_EQ(empty->worker_clocks_size(), 1);
}

INSTANTIATE_TEST_SUITE_P(Stores, UnitMoverSparseTest,
                         ::testing::Values(testing::StoreKind::kMemory,
                                           testing::StoreKind::kRocksDb),
                         testing::StoreKindName);
INSTANTIATE_TEST_SUITE_P(TieredStores, UnitMoverSparseTest,
                         ::testing::Values(testing::StoreKind::kMemory,
                                           testing::StoreKind::kRocksDb),
                         testing::StoreKindName);

}  // namespace
}  // namespace ps

// A job's sparse tables on a server (docs/sparse.md): rows pulled by id,
// row gradients applied exactly once under SSP and averaged under BSP,
// malformed sparse requests refused without a change, and the rows restored
// bit for bit from the snapshot and the update log. Every test runs against
// MemoryShardStore and RocksDbShardStore, and again (the "Tiered"
// instantiations) with a memory budget of a few rows, the others in the
// sparse tier: a reopened job comes back with a cold cache and the same rows,
// and agrees with a twin that has no budget.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/half_codec.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "server/memory_shard_store.h"
#include "server/server_job.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/server_job_store_fixture.h"
#include "tests/testing/tiny_assignment.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr char kJobId[] = "job-000001";
constexpr int kDim = 4;
constexpr int kBuckets = 8;
constexpr float kLearningRate = 0.5f;

using Rows = std::vector<float>;  // Rows of ids, dim values each.

struct SparseJobOptions {
  v1::ConsistencySpec::Model model = v1::ConsistencySpec::SSP;
  int num_workers = 1;
  bool rowwise_adagrad = false;  // Else SGD.
  int32_t min_count = 0;         // Admission.
  v1::NonFinitePolicy non_finite = v1::NON_FINITE_POLICY_UNSPECIFIED;
};

// An EXTERNAL model with one dense tensor and one sparse table of kDim,
// whose kBuckets buckets alternate between two servers; this is server 0.
v1::Assignment MakeAssignment(const SparseJobOptions& options) {
  v1::Assignment a;
  a.set_job_id(kJobId);
  v1::JobSpec* spec = a.mutable_spec();
  *spec = testing::TinySparseSpec("sparse", kDim, kBuckets);
  v1::SparseTableSpec* table = spec->mutable_model()->mutable_sparse_tables(0);
  if (options.rowwise_adagrad) {
    table->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(
        0.1f);
  } else {
    table->mutable_optimizer()->mutable_sgd()->set_learning_rate(kLearningRate);
  }
  table->mutable_admission()->set_min_count(options.min_count);
  spec->set_seed(11);
  spec->mutable_optimizer()->mutable_sgd()->set_learning_rate(kLearningRate);
  spec->mutable_consistency()->set_model(options.model);
  spec->mutable_consistency()->set_staleness(
      options.model == v1::ConsistencySpec::SSP ? 3 : 0);
  spec->set_num_workers(options.num_workers);
  spec->set_num_servers(2);
  spec->set_non_finite_gradients(options.non_finite);
  ApplyJobSpecDefaults(spec);
  a.set_index(0);
  a.set_num_workers(options.num_workers);
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(1);
  map->add_servers("localhost:0");
  map->add_servers("localhost:1");
  testing::PlaceTinySparseJob(
      *spec, kBuckets, [](uint32_t b) { return static_cast<int>(b % 2); }, map);
  return a;
}

// The first `n` ids (from 1 up) whose bucket is on server `server`.
std::vector<uint64_t> IdsOn(int server, int n) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; static_cast<int>(ids.size()) < n; ++id) {
    if (static_cast<int>(BucketOfId(id, 0, kBuckets) % 2) == server) {
      ids.push_back(id);
    }
  }
  return ids;
}

std::string Bytes(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

v1::SparseRows* AddRows(v1::PushRequest* push, uint32_t table,
                        const std::vector<uint64_t>& ids, const Rows& grads) {
  v1::SparseRows* rows = push->add_sparse();
  rows->set_table(table);
  rows->set_keys(Bytes(ids.data(), ids.size() * sizeof(uint64_t)));
  rows->set_values(Bytes(grads.data(), grads.size() * sizeof(float)));
  return rows;
}

v1::PushRequest MakePush(int worker, int64_t clock,
                         const std::vector<uint64_t>& ids, const Rows& grads) {
  v1::PushRequest push;
  push.set_job_id(kJobId);
  push.set_worker_index(worker);
  push.set_clock(clock);
  push.set_map_version(1);
  AddRows(&push, 0, ids, grads);
  return push;
}

// Gradients for `n` rows: a pure function of `salt`.
Rows Gradients(int n, int salt) {
  Rows g(static_cast<size_t>(n) * kDim);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = 0.25f * std::sin(
                       static_cast<float>(static_cast<size_t>(salt) * 31 + i)) +
           0.01f * salt;
  }
  return g;
}

class ServerJobSparseTest : public testing::ServerJobStoreFixture {
 protected:
  // The "Tiered" instantiations' budget: two or three rows of the table.
  static int64_t Budget() {
    const std::string suite = ::testing::UnitTest::GetInstance()
                                  ->current_test_info()
                                  ->test_suite_name();
    return suite.rfind("Tiered", 0) == 0 ? 700 : 0;
  }

  std::unique_ptr<ServerJob> Open(const SparseJobOptions& options,
                                  ServerJobOptions job_options = {}) {
    job_options.sparse_memory_bytes = Budget();
    auto job = ServerJob::Open(MakeAssignment(options), store_.get(), &metrics_,
                               job_options);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *std::move(job) : nullptr;
  }

  // The pull's reply, or its error; must be answered at once.
  absl::StatusOr<v1::PullResponse> PullNow(ServerJob& job, int64_t clock,
                                           const std::vector<uint64_t>& ids) {
    v1::PullRequest request;
    request.set_job_id(kJobId);
    request.set_clock(clock);
    request.set_map_version(1);
    v1::SparseRows* rows = request.add_sparse();
    rows->set_keys(Bytes(ids.data(), ids.size() * sizeof(uint64_t)));
    absl::StatusOr<v1::PullResponse> out = absl::UnknownError("waited");
    job.Pull(request, [&out](absl::StatusOr<v1::PullResponse> reply) {
      out = std::move(reply);
    });
    return out;
  }

  Rows RowsNow(ServerJob& job, int64_t clock,
               const std::vector<uint64_t>& ids) {
    absl::StatusOr<v1::PullResponse> reply = PullNow(job, clock, ids);
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok() || reply->sparse_size() != 1) return {};
    const std::string& values = reply->sparse(0).values();
    Rows rows(values.size() / sizeof(float));
    if (!rows.empty()) std::memcpy(rows.data(), values.data(), values.size());
    return rows;
  }

  // Pushes and waits until the push is answered (durable).
  absl::StatusOr<v1::PushResponse> Push(ServerJob& job,
                                        const v1::PushRequest& request) {
    absl::StatusOr<v1::PushResponse> out = absl::UnknownError("parked");
    job.Push(request, [&out](absl::StatusOr<v1::PushResponse> reply) {
      out = std::move(reply);
    });
    EXPECT_TRUE(job.Flush().ok());
    return out;
  }
};

TEST_P(ServerJobSparseTest, RowsReadAsTheirInitializerAndReadsChangeNothing) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  const std::vector<uint64_t> ids = IdsOn(0, 5);
  const Rows first = RowsNow(*job, 0, ids);
  ASSERT_EQ(first.size(), ids.size() * kDim);
  EXPECT_TRUE(
      std::any_of(first.begin(), first.end(), [](float v) { return v != 0; }));
  EXPECT_EQ(RowsNow(*job, 0, ids), first);
  // Another server, store or restart makes the same rows: a pure function
  // of (seed, table, id).
  ASSERT_TRUE(store_->DeleteJob(kJobId).ok());
  job.reset();
  auto again = Open({});
  ASSERT_NE(again, nullptr);
  constexpr std::ptrdiff_t kRow = kDim;
  Rows expected(first.begin() + 3 * kRow, first.begin() + 4 * kRow);
  expected.insert(expected.end(), first.begin() + kRow,
                  first.begin() + 2 * kRow);
  EXPECT_EQ(RowsNow(*again, 0, {ids[3], ids[1]}), expected);
}

TEST_P(ServerJobSparseTest, SspPushAppliesSgdToTheNamedRowsOnly) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  const std::vector<uint64_t> ids = IdsOn(0, 3);
  const Rows before = RowsNow(*job, 0, ids);
  const Rows g = Gradients(2, 1);
  ASSERT_TRUE(Push(*job, MakePush(0, 0, {ids[0], ids[1]}, g)).ok());
  const Rows after = RowsNow(*job, 1, ids);
  ASSERT_EQ(after.size(), before.size());
  for (int i = 0; i < 2 * kDim; ++i) {
    EXPECT_FLOAT_EQ(after[i], before[i] - kLearningRate * g[i]) << i;
  }
  for (int i = 2 * kDim; i < 3 * kDim; ++i) EXPECT_EQ(after[i], before[i]);
  // A retry is acknowledged as a duplicate and not applied again.
  auto retry = Push(*job, MakePush(0, 0, {ids[0], ids[1]}, g));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->duplicate());
  EXPECT_EQ(RowsNow(*job, 1, ids), after);
}

TEST_P(ServerJobSparseTest, BspAveragesRowsOverAllWorkers) {
  auto job = Open({.model = v1::ConsistencySpec::BSP, .num_workers = 2});
  ASSERT_NE(job, nullptr);
  const std::vector<uint64_t> ids = IdsOn(0, 3);
  const Rows before = RowsNow(*job, 0, ids);
  const Rows g = Gradients(2, 2);  // Worker 0: ids 0 and 1.
  const Rows h = Gradients(2, 3);  // Worker 1: ids 1 and 2.
  absl::StatusOr<v1::PushResponse> first = absl::UnknownError("parked");
  job->Push(
      MakePush(0, 0, {ids[0], ids[1]}, g),
      [&first](absl::StatusOr<v1::PushResponse> r) { first = std::move(r); });
  ASSERT_TRUE(job->Flush().ok());
  EXPECT_TRUE(absl::IsUnknown(first.status()));  // Waits for worker 1.
  ASSERT_TRUE(Push(*job, MakePush(1, 0, {ids[1], ids[2]}, h)).ok());
  ASSERT_TRUE(first.ok()) << first.status();
  const Rows after = RowsNow(*job, 1, ids);
  for (int j = 0; j < kDim; ++j) {
    EXPECT_FLOAT_EQ(after[j], before[j] - kLearningRate * g[j] / 2);
    EXPECT_FLOAT_EQ(
        after[kDim + j],
        before[kDim + j] - kLearningRate * (g[kDim + j] + h[j]) / 2);
    EXPECT_FLOAT_EQ(after[2 * kDim + j],
                    before[2 * kDim + j] - kLearningRate * h[kDim + j] / 2);
  }
}

// The duplicate check (a set each request thread reuses) finds a repeat
// far from its first occurrence among many ids, request after request, and
// passes the same ids once each.
TEST_P(ServerJobSparseTest, RepeatedIdAmongManyIsRefusedEachTime) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  const std::vector<uint64_t> many = IdsOn(0, 3000);
  for (const size_t first : {size_t{0}, size_t{1234}, size_t{2998}}) {
    std::vector<uint64_t> ids = many;
    ids.push_back(many[first]);
    auto reply = Push(*job, MakePush(0, 0, ids, Rows(ids.size() * kDim, 0.5f)));
    EXPECT_TRUE(absl::IsInvalidArgument(reply.status())) << reply.status();
    EXPECT_THAT(reply.status().message(), HasSubstr("more than once"));
  }
  EXPECT_TRUE(PullNow(*job, 0, many).ok());
  EXPECT_TRUE(
      Push(*job, MakePush(0, 0, many, Rows(many.size() * kDim, 0.5f))).ok());
}

TEST_P(ServerJobSparseTest, MalformedSparseRequestsAreRefusedAndChangeNothing) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  const std::vector<uint64_t> mine = IdsOn(0, 2);
  const std::vector<uint64_t> theirs = IdsOn(1, 1);
  const Rows before = RowsNow(*job, 0, mine);
  const Rows g = Gradients(2, 4);
  const auto refused = [&](const v1::PushRequest& push, const char* why) {
    auto reply = Push(*job, push);
    EXPECT_TRUE(absl::IsInvalidArgument(reply.status())) << reply.status();
    EXPECT_THAT(reply.status().message(), HasSubstr(why));
  };
  refused(MakePush(0, 0, {mine[0], mine[0]}, g), "more than once");
  refused(MakePush(0, 0, {mine[0], theirs[0]}, g), "does not hold");
  refused(MakePush(0, 0, mine, Rows(g.begin(), g.end() - 1)), "values hold");
  v1::PushRequest unknown = MakePush(0, 0, mine, g);
  unknown.mutable_sparse(0)->set_table(1);
  refused(unknown, "does not exist");
  v1::PushRequest twice = MakePush(0, 0, mine, g);
  AddRows(&twice, 0, mine, g);
  refused(twice, "more than once");
  v1::PushRequest ragged = MakePush(0, 0, mine, g);
  ragged.mutable_sparse(0)->mutable_keys()->push_back('x');
  refused(ragged, "whole number");
  std::vector<uint64_t> many(kMaxSparseKeysPerRequest + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i + 1;
  refused(MakePush(0, 0, many, Rows(many.size() * kDim)), "at most");
  Rows nan = g;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  refused(MakePush(0, 0, mine, nan), "NaN");
  auto pulled = PullNow(*job, 0, {mine[0], theirs[0]});
  EXPECT_TRUE(absl::IsInvalidArgument(pulled.status())) << pulled.status();
  // Nothing changed: the clock is still 0 and the rows are as they were.
  EXPECT_EQ(job->min_clock(), 0);
  EXPECT_EQ(RowsNow(*job, 0, mine), before);
  ASSERT_TRUE(Push(*job, MakePush(0, 0, mine, g)).ok());
}

TEST_P(ServerJobSparseTest, SixteenBitRowGradientsAreDecodedExactly) {
  auto job = Open({});
  ASSERT_NE(job, nullptr);
  const std::vector<uint64_t> ids = IdsOn(0, 2);
  const Rows before = RowsNow(*job, 0, ids);
  Rows g = Gradients(2, 5);
  std::vector<uint16_t> half(g.size());
  EncodeBf16(g, half.data());
  DecodeBf16(half, g.data());  // What the server will see.
  v1::PushRequest push = MakePush(0, 0, ids, g);
  push.set_gradient_encoding(v1::BF16);
  push.mutable_sparse(0)->set_values(
      Bytes(half.data(), half.size() * sizeof(uint16_t)));
  ASSERT_TRUE(Push(*job, push).ok());
  const Rows after = RowsNow(*job, 1, ids);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_FLOAT_EQ(after[i], before[i] - kLearningRate * g[i]);
  }
}

TEST_P(ServerJobSparseTest, ReopeningRestoresRowsAndAdmissionBitForBit) {
  for (int64_t interval : {int64_t{1}, int64_t{1} << 40}) {
    ASSERT_TRUE(store_->DeleteJob(kJobId).ok());
    const SparseJobOptions options = {
        .num_workers = 2, .rowwise_adagrad = true, .min_count = 2};
    auto served = Open(options, {.snapshot_log_bytes = interval});
    ASSERT_NE(served, nullptr);
    // The same history on a store of its own: what the job would do next
    // had it never been reopened.
    std::unique_ptr<ShardStore> twin_store = MemoryShardStore::Create();
    auto twin = ServerJob::Open(MakeAssignment(options), twin_store.get(),
                                &metrics_, {.snapshot_log_bytes = interval});
    ASSERT_TRUE(twin.ok()) << twin.status();
    const std::vector<uint64_t> ids = IdsOn(0, 6);
    for (int clock = 0; clock < 4; ++clock) {
      for (int worker = 0; worker < 2; ++worker) {
        // Overlapping subsets of the ids: some reach min_count, some not.
        const size_t from = worker + clock % 2;
        const std::vector<uint64_t> some(ids.begin() + from,
                                         ids.begin() + from + 3);
        const v1::PushRequest push =
            MakePush(worker, clock, some, Gradients(3, clock * 2 + worker));
        ASSERT_TRUE(Push(*served, push).ok());
        ASSERT_TRUE(Push(**twin, push).ok());
      }
    }
    const Rows rows = RowsNow(*served, 4, ids);
    // Reopened while the served job is still open: nothing but the snapshot
    // and the log, as after a crash.
    auto reopened = Open(options, {.snapshot_log_bytes = interval});
    ASSERT_NE(reopened, nullptr);
    served.reset();
    EXPECT_EQ(reopened->min_clock(), 4);
    const Rows again = RowsNow(*reopened, 4, ids);
    ASSERT_EQ(again.size(), rows.size());
    EXPECT_EQ(
        std::memcmp(again.data(), rows.data(), rows.size() * sizeof(float)), 0)
        << "interval " << interval;
    // Further updates agree too: admission counts and optimizer state came
    // back with the rows.
    for (ServerJob* job : {reopened.get(), twin->get()}) {
      ASSERT_TRUE(Push(*job, MakePush(0, 4, ids, Gradients(6, 9))).ok());
      ASSERT_TRUE(Push(*job, MakePush(1, 4, ids, Gradients(6, 10))).ok());
    }
    EXPECT_EQ(RowsNow(*reopened, 5, ids), RowsNow(**twin, 5, ids));
    if (Budget() > 0) {  // Rows did live in the tier, and came back from it.
      const std::string body =
          prometheus::TextSerializer().Serialize(registry_.Collect());
      EXPECT_GT(testing::MetricValue(
                    body, "ps_sparse_tier_disk_reads_total{table=\"emb\"}")
                    .value_or(0),
                0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, ServerJobSparseTest,
                         ::testing::Values(testing::StoreKind::kMemory,
                                           testing::StoreKind::kRocksDb),
                         testing::StoreKindName);
INSTANTIATE_TEST_SUITE_P(TieredStores, ServerJobSparseTest,
                         ::testing::Values(testing::StoreKind::kMemory,
                                           testing::StoreKind::kRocksDb),
                         testing::StoreKindName);

}  // namespace
}  // namespace ps

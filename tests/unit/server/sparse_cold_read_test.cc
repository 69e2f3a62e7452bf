// A pull's cold reads made without the job's lock (docs/sparse.md,
// "Threading"; server/sparse_cold_read.cc): whatever happens to the rows
// between the plan and the read under the lock again (another pull
// promotes them, a push changes them, they are demoted changed, evicted,
// restored, created), the rows read are the rows a table without a budget
// holds at that moment, bit for bit. First each move on its own, then real
// threads: readers planning and reading beside a writer and beside each
// other, over the same rows, with a mutex standing for the job's lock.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/sparse_table.h"
#include "server/sparse_tier.h"
#include "tests/testing/test_tier.h"

namespace ps {
namespace {

constexpr int kDim = 4;

v1::SparseTableSpec Spec(int64_t max_idle_clocks = 0) {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(kDim);
  spec.set_num_buckets(8);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  spec.mutable_eviction()->set_max_idle_clocks(max_idle_clocks);
  return spec;
}

// A table capped at a few dozen rows and its twin without a budget, changed
// alike.
struct Twins {
  std::unique_ptr<SparseTier> tier;
  std::unique_ptr<SparseTable> tiered;
  std::unique_ptr<SparseTable> plain;

  // A small queue: reads go to the queue and to ingested files alike.
  explicit Twins(int64_t max_idle_clocks = 0)
      : tier(testing::OpenTestTier({.queue_bytes = 16 << 10})) {
    const v1::SparseTableSpec spec = Spec(max_idle_clocks);
    auto a = SparseTable::Create(spec, 0, 5, false,
                                 {.tier = tier.get(), .cap_bytes = 4096});
    auto b = SparseTable::Create(spec, 0, 5, false);
    EXPECT_TRUE(a.ok() && b.ok());
    tiered = *std::move(a);
    plain = *std::move(b);
  }
  void Apply(const std::vector<uint64_t>& keys, int64_t clock, int salt) {
    std::vector<float> grads(keys.size() * kDim);
    for (size_t i = 0; i < grads.size(); ++i) {
      grads[i] =
          static_cast<float>((i * 7 + static_cast<size_t>(salt)) % 13) / 8.0f -
          0.7f;
    }
    tiered->Apply(keys, grads, clock, 1.0f);
    plain->Apply(keys, grads, clock, 1.0f);
  }
  // The twin's rows of `keys` now.
  std::vector<float> Want(const std::vector<uint64_t>& keys) const {
    std::vector<float> out(keys.size() * kDim);
    plain->Read(keys, out.data());
    return out;
  }
};

std::vector<uint64_t> Range(uint64_t first, int n) {
  std::vector<uint64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

// Each move between a plan and its read under the lock, with the tier read
// before the move and after it: the rows read are the twin's at the end.
TEST(SparseColdReadTest, EachMoveBetweenThePlanAndTheReadIsSeen) {
  struct Move {
    const char* name;
    int64_t max_idle_clocks;
    std::function<void(Twins&, const std::vector<uint64_t>&)> run;
  };
  const std::vector<Move> moves = {
      {"nothing", 0, [](Twins&, const std::vector<uint64_t>&) {}},
      {"another pull promotes them", 0,
       [](Twins& t, const std::vector<uint64_t>& keys) {
         std::vector<float> out(keys.size() * kDim);
         t.tiered->Read(keys, out.data());
       }},
      {"a push changes them", 0,
       [](Twins& t, const std::vector<uint64_t>& keys) {
         t.Apply(keys, 10, 1);
       }},
      {"promoted, changed, demoted changed", 0,
       [](Twins& t, const std::vector<uint64_t>& keys) {
         std::vector<float> out(keys.size() * kDim);
         t.tiered->Read(keys, out.data());
         t.Apply(keys, 10, 2);
         t.Apply(Range(9000, 200), 11, 3);  // Fills memory: demotes them.
       }},
      {"changed while cold, written back", 0,
       [](Twins& t, const std::vector<uint64_t>& keys) {
         // More keys than memory holds: most are stepped outside memory.
         std::vector<uint64_t> many = Range(7000, 150);
         many.insert(many.end(), keys.begin(), keys.end());
         t.Apply(many, 10, 4);
       }},
      {"evicted", 3,
       [](Twins& t, const std::vector<uint64_t>&) {
         for (int64_t clock = 10; clock < 15; ++clock) t.Apply({1}, clock, 5);
       }},
      {"restored", 0,
       [](Twins& t, const std::vector<uint64_t>& keys) {
         // Every bucket as the twin held it before one more push.
         const std::vector<StoredBlock> saved = t.plain->Snapshot();
         t.Apply(keys, 10, 6);
         for (const StoredBlock& b : saved) {
           ASSERT_TRUE(t.tiered->Restore(b).ok());
           ASSERT_TRUE(t.plain->Restore(b).ok());
         }
       }},
  };
  for (const Move& move : moves) {
    for (const bool read_first : {true, false}) {
      SCOPED_TRACE(std::string(move.name) +
                   (read_first ? ", tier read before" : ", tier read after"));
      Twins t(move.max_idle_clocks);
      // 300 rows at clock 0, then 60 others: most of the 300 are cold.
      t.Apply(Range(100, 300), 0, 0);
      t.Apply(Range(5000, 60), 1, 0);
      // The pull: 40 cold rows, 2 hot ones and 3 never seen (the push may
      // create them).
      std::vector<uint64_t> keys = Range(120, 40);
      keys.push_back(5000);
      keys.push_back(5001);
      for (const uint64_t id : {uint64_t{1}, uint64_t{9001}, uint64_t{7001}}) {
        keys.push_back(id);
      }
      SparseTable::ColdRead cold;
      t.tiered->PlanColdRead(keys, &cold);
      ASSERT_GT(cold.ids.size(), 30u);  // Most of the 40 are cold.
      if (read_first) t.tiered->ReadCold(&cold);
      move.run(t, keys);
      if (!read_first) t.tiered->ReadCold(&cold);
      std::vector<float> got(keys.size() * kDim);
      t.tiered->Read(keys, got.data(), &cold);
      const std::vector<float> want = t.Want(keys);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
      // And the table's state is the twin's: a later plain read, and the
      // rows held.
      std::vector<uint64_t> all = Range(100, 300);
      all.insert(all.end(), keys.begin(), keys.end());
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      std::vector<float> later(all.size() * kDim);
      t.tiered->Read(all, later.data());
      EXPECT_EQ(std::memcmp(later.data(), t.Want(all).data(), later.size() * 4),
                0);
      EXPECT_EQ(t.tiered->num_rows(), t.plain->num_rows());
      EXPECT_TRUE(t.tiered->tier_status().ok());
    }
  }
}

// A plan dropped (the job closed in between) is taken back: later tier
// writes of its rows are not noted for it, and reads stay right.
TEST(SparseColdReadTest, DroppedPlansAreTakenBack) {
  Twins t;
  t.Apply(Range(100, 300), 0, 0);
  const std::vector<uint64_t> keys = Range(100, 50);
  SparseTable::ColdRead cold;
  t.tiered->PlanColdRead(keys, &cold);
  ASSERT_FALSE(cold.ids.empty());
  t.tiered->ReadCold(&cold);
  t.tiered->DropColdRead(&cold);
  EXPECT_TRUE(cold.ids.empty());
  t.Apply(keys, 1, 1);
  std::vector<float> got(keys.size() * kDim);
  t.tiered->Read(keys, got.data());
  EXPECT_EQ(std::memcmp(got.data(), t.Want(keys).data(), got.size() * 4), 0);
}

// Real threads: three readers plan under the lock, read the tier without
// it and read under it again, beside a writer pushing power-law ids (the
// readers' ids among them) and beside one another; at each read under the
// lock the rows equal the twin's at that moment, bit for bit.
TEST(SparseColdReadTest, ThreadsReadingBesideAPushAgreeWithTheTwin) {
  Twins t;
  std::mutex mu;  // The job's lock.
  t.Apply(Range(0, 400), 0, 0);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> mismatches{0};
  std::atomic<int64_t> planned_rows{0};
  std::atomic<int64_t> reads{0};
  // Power-law ids over 600: the readers and the writer often meet.
  const auto draw = [](std::mt19937_64& rng, int n) {
    std::vector<uint64_t> ids;
    std::uniform_real_distribution<double> u(0, 1);
    while (static_cast<int>(ids.size()) < n) {
      const auto id = static_cast<uint64_t>(600 * u(rng) * u(rng) * u(rng));
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    return ids;
  };
  std::vector<std::thread> readers;
  readers.reserve(3);
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(100 + static_cast<uint64_t>(r));
      while (!stop.load() || reads.load() < 300) {
        const std::vector<uint64_t> keys = draw(rng, 30);
        SparseTable::ColdRead cold;
        {
          std::lock_guard<std::mutex> lock(mu);
          t.tiered->PlanColdRead(keys, &cold);
        }
        planned_rows += static_cast<int64_t>(cold.ids.size());
        t.tiered->ReadCold(&cold);
        std::vector<float> got(keys.size() * kDim);
        std::vector<float> want;
        {
          std::lock_guard<std::mutex> lock(mu);
          t.tiered->Read(keys, got.data(), &cold);
          want = t.Want(keys);
        }
        if (std::memcmp(got.data(), want.data(), got.size() * 4) != 0) {
          ++mismatches;
        }
        ++reads;
      }
    });
  }
  std::mt19937_64 rng(7);
  for (int64_t clock = 1; clock <= 300; ++clock) {
    const std::vector<uint64_t> keys = draw(rng, 40);
    std::lock_guard<std::mutex> lock(mu);
    t.Apply(keys, clock, static_cast<int>(clock));
  }
  stop = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(planned_rows.load(), 0);  // The tier was read out of the lock.
  EXPECT_TRUE(t.tiered->tier_status().ok());
  const std::vector<StoredBlock> got = t.tiered->Snapshot();
  const std::vector<StoredBlock> want = t.plain->Snapshot();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].rows == want[i].rows) << "bucket block " << i;
  }
}

}  // namespace
}  // namespace ps

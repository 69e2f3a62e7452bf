// The memory tier's writes as ingested table files (docs/sparse.md,
// "Threading"): the writer merges the queued batches into one sorted file
// once half the queue's bound is queued (or a caller waits for it), the
// newest change of a row wins across batches and within one, a deletion
// hides the row's older copies in earlier files, and a table under a budget
// whose demotions go through many such files reads, pushes and snapshots the
// same bits as a table without a budget.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
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

void Put(SparseTier::Batch& batch, uint64_t id, float value) {
  const float row[2] = {value, -value};
  batch.Put(3, id, /*clock=*/static_cast<int64_t>(value), /*updates=*/1, row,
            2);
}

// Reads `ids` of table 3 and checks them against `model` (id -> first
// float; absent: no row), through MultiGet and, when `scan`, ForEach.
void ExpectTier(const SparseTier& tier, const std::vector<uint64_t>& ids,
                const std::map<uint64_t, float>& model, bool scan,
                const std::string& where) {
  std::vector<std::string> values;
  ASSERT_TRUE(tier.MultiGet(3, ids, &values).ok()) << where;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = model.find(ids[i]);
    if (it == model.end()) {
      EXPECT_TRUE(values[i].empty()) << where << ": id " << ids[i];
      continue;
    }
    float back[2];
    int64_t clock = 0, updates = 0;
    ASSERT_TRUE(SparseTier::Decode(values[i], 2, &clock, &updates, back))
        << where << ": id " << ids[i];
    EXPECT_EQ(back[0], it->second) << where << ": id " << ids[i];
    EXPECT_EQ(back[1], -it->second) << where << ": id " << ids[i];
  }
  if (!scan) return;
  EXPECT_EQ(testing::ListedTierRows(tier, 3, 2), model) << where;
}

// Batches queued while the writer is paused go into one file when it
// resumes: of a row's changes the newest wins, whether the older ones are
// in an earlier batch of the same file, earlier in the same batch, or in a
// file ingested before; a deletion hides the row's copy in an earlier file.
TEST(SparseTierIngestTest, NewestChangeWinsAcrossBatchesAndFiles) {
  std::unique_ptr<SparseTier> tier =
      testing::OpenTestTier({.queue_bytes = size_t{1} << 20});
  ASSERT_NE(tier, nullptr);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 100; ++id) ids.push_back(id * 7919);
  std::map<uint64_t, float> model;
  SparseTier::Batch a;
  for (uint64_t id : ids) {
    Put(a, id, 1);
    model[id] = 1;
  }
  ASSERT_TRUE(tier->Write(a).ok());
  ASSERT_TRUE(tier->Drain().ok());
  EXPECT_EQ(tier->files_ingested(), 1);

  tier->PauseWriterForTest(true);
  SparseTier::Batch b, c, d;
  for (size_t i = 0; i < 50; ++i) {
    Put(b, ids[i], 2);
    model[ids[i]] = 2;
  }
  for (size_t i = 50; i < 60; ++i) {
    b.Delete(3, ids[i]);
    model.erase(ids[i]);
  }
  for (size_t i = 0; i < 10; ++i) {
    Put(c, ids[i], 3);
    model[ids[i]] = 3;
  }
  for (size_t i = 10; i < 20; ++i) {
    c.Delete(3, ids[i]);
    model.erase(ids[i]);
  }
  Put(c, ids[55], 4);  // Deleted by b, put again by c.
  model[ids[55]] = 4;
  Put(c, ids[70], 5);  // Twice in one batch: the second wins.
  Put(c, ids[70], 6);
  model[ids[70]] = 6;
  c.Delete(3, ids[80]);  // Put then deleted in one batch.
  Put(c, ids[80], 7);
  c.Delete(3, ids[80]);
  model.erase(ids[80]);
  for (size_t i = 0; i < 5; ++i) {
    d.Delete(3, ids[i]);
    model.erase(ids[i]);
  }
  Put(d, 1, 8);  // A new id.
  model[1] = 8;
  ids.push_back(1);
  for (SparseTier::Batch* batch : {&b, &c, &d}) {
    ASSERT_TRUE(tier->Write(*batch).ok());
  }
  // Paused: read from the queue.
  EXPECT_GT(tier->queued_bytes(), 0u);
  ExpectTier(*tier, ids, model, /*scan=*/false, "queued");
  EXPECT_EQ(tier->files_ingested(), 1);
  tier->PauseWriterForTest(false);
  ASSERT_TRUE(tier->Drain().ok());
  EXPECT_EQ(tier->files_ingested(), 2);  // b, c and d in one file.
  EXPECT_EQ(tier->queued_bytes(), 0u);
  ExpectTier(*tier, ids, model, /*scan=*/true, "ingested");
}

// The writer waits for half the queue's bound before it writes (few, large
// files), unless a caller waits for it (Drain); random puts and deletes
// read back right after each write match a model, and so does a scan.
TEST(SparseTierIngestTest, FilesAreHalfTheQueueAndReadsSeeEveryWrite) {
  const size_t queue = size_t{64} << 10;
  std::unique_ptr<SparseTier> tier =
      testing::OpenTestTier({.queue_bytes = queue});
  ASSERT_NE(tier, nullptr);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = rng();
  std::map<uint64_t, float> model;
  size_t written = 0;
  int drains = 0;
  for (int round = 0; round < 200; ++round) {
    const int64_t files_before = tier->files_ingested();
    const size_t queued_before = tier->queued_bytes();
    SparseTier::Batch batch;
    const int ops = 1 + static_cast<int>(rng() % 24);
    for (int k = 0; k < ops; ++k) {
      const uint64_t id = ids[rng() % ids.size()];
      if (rng() % 5 == 0) {
        batch.Delete(3, id);
        model.erase(id);
      } else {
        const auto value = static_cast<float>(round * 100 + k);
        Put(batch, id, value);
        model[id] = value;
      }
    }
    const size_t bytes = batch.bytes();
    ASSERT_TRUE(tier->Write(batch).ok());
    written += bytes;
    EXPECT_LE(tier->queued_bytes(), queue);
    if (2 * (queued_before + bytes) < queue) {
      // Below half, nobody waiting: nothing written yet.
      EXPECT_EQ(tier->files_ingested(), files_before) << "round " << round;
    }
    ExpectTier(*tier, ids, model, /*scan=*/false,
               "round " + std::to_string(round));
    if (round % 50 == 49) {
      ASSERT_TRUE(tier->Drain().ok());
      ++drains;
      EXPECT_EQ(tier->queued_bytes(), 0u);
    }
  }
  EXPECT_GT(tier->files_ingested(), drains);  // Some files by the bound.
  EXPECT_LE(tier->files_ingested(),
            static_cast<int64_t>(written / (queue / 2)) + drains + 1);
  ExpectTier(*tier, ids, model, /*scan=*/true, "end");
}

// Thousands of small batches queued (a few rows each, as a clock of a
// lightly used table demotes), then a large batch whose rows the writer
// forgets in pieces after ingesting it: reads from another thread meanwhile
// find every row's newest value, whether it is still queued or in RocksDB.
TEST(SparseTierIngestTest, ReadsFindTheNewestRowAmongThousandsOfBatches) {
  std::unique_ptr<SparseTier> tier =
      testing::OpenTestTier({.queue_bytes = size_t{256} << 20});
  ASSERT_NE(tier, nullptr);
  std::vector<uint64_t> ids(20000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 104729 + 7;
  std::map<uint64_t, float> model;
  tier->PauseWriterForTest(true);
  for (int b = 0; b < 3000; ++b) {
    SparseTier::Batch batch;
    for (int k = 0; k < 3; ++k) {
      const uint64_t id = ids[(b * 7 + k * 1013) % 2000];
      if ((b + k) % 11 == 0) {
        batch.Delete(3, id);
        model.erase(id);
      } else {
        Put(batch, id, static_cast<float>(b * 10 + k));
        model[id] = static_cast<float>(b * 10 + k);
      }
    }
    ASSERT_TRUE(tier->Write(batch).ok());
  }
  ExpectTier(*tier, ids, model, /*scan=*/false, "3000 batches queued");
  SparseTier::Batch large;
  for (size_t i = 1000; i < ids.size(); ++i) {
    Put(large, ids[i], static_cast<float>(i));
    model[ids[i]] = static_cast<float>(i);
  }
  ASSERT_TRUE(tier->Write(large).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    while (!stop.load()) {
      ExpectTier(*tier, ids, model, /*scan=*/false, "while written");
      ++reads;
    }
  });
  tier->PauseWriterForTest(false);
  ASSERT_TRUE(tier->Drain().ok());
  stop = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(tier->queued_bytes(), 0u);
  ExpectTier(*tier, ids, model, /*scan=*/true, "ingested");
}

v1::SparseTableSpec Spec(int64_t max_idle_clocks) {
  v1::SparseTableSpec spec;
  spec.set_name("emb");
  spec.set_dim(8);
  spec.set_num_buckets(8);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-8f);
  spec.mutable_eviction()->set_max_idle_clocks(max_idle_clocks);
  return spec;
}

// A table capped at 4 KiB on a tier with a 16 KiB queue (a file every few
// clocks) against a twin without a budget, over 80 clocks of pulls and
// pushes of power-law ids, with and without idle eviction (deletions in the
// files): every pull reads the same bits, the rows and the snapshot are the
// twin's, and the tier wrote many files.
TEST(SparseTierIngestTest, TableUnderBudgetMatchesTwinThroughManyFiles) {
  for (const int64_t idle : {int64_t{0}, int64_t{6}}) {
    std::unique_ptr<SparseTier> tier =
        testing::OpenTestTier({.queue_bytes = size_t{16} << 10});
    ASSERT_NE(tier, nullptr);
    const v1::SparseTableSpec spec = Spec(idle);
    auto tiered = SparseTable::Create(spec, 0, 9, false,
                                      {.tier = tier.get(), .cap_bytes = 4096});
    auto plain = SparseTable::Create(spec, 0, 9, false);
    ASSERT_TRUE(tiered.ok() && plain.ok());
    std::mt19937_64 rng(idle + 1);
    std::vector<uint64_t> all;
    for (int clock = 0; clock < 80; ++clock) {
      std::vector<uint64_t> keys;
      for (int k = 0; k < 64; ++k) {
        // Power law over 4,000 ids: a few frequent, a long tail.
        const double u = std::uniform_real_distribution<double>(0, 1)(rng);
        keys.push_back(static_cast<uint64_t>(4000 * u * u * u) * 131 + 5);
      }
      std::vector<float> a(keys.size() * 8), b(keys.size() * 8);
      (*tiered)->Read(keys, a.data());
      (*plain)->Read(keys, b.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "idle " << idle << " clock " << clock;
      std::vector<float> grads(keys.size() * 8);
      for (float& g : grads) g = static_cast<float>(rng() % 200) / 100 - 1;
      (*tiered)->Apply(keys, grads, clock, 1.0f);
      (*plain)->Apply(keys, grads, clock, 1.0f);
      all.insert(all.end(), keys.begin(), keys.end());
    }
    EXPECT_GT(tier->files_ingested(), 3) << "idle " << idle;
    EXPECT_GT((*tiered)->tier_counts().cold_rows, 0) << "idle " << idle;
    EXPECT_EQ((*tiered)->num_rows(), (*plain)->num_rows()) << "idle " << idle;
    std::vector<float> a(all.size() * 8), b(all.size() * 8);
    (*tiered)->Read(all, a.data());
    (*plain)->Read(all, b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "idle " << idle;
    const std::vector<StoredBlock> got = (*tiered)->Snapshot();
    const std::vector<StoredBlock> want = (*plain)->Snapshot();
    ASSERT_EQ(got.size(), want.size()) << "idle " << idle;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].key, want[i].key) << "idle " << idle;
      EXPECT_EQ(got[i].rows, want[i].rows)
          << "idle " << idle << " bucket block " << i;
    }
  }
}

}  // namespace
}  // namespace ps

// BSP equals one big batch for sparse tables too (docs/consistency.md,
// docs/sparse.md): two real workers (Trainer) of batch b against one of
// batch 2b that sees, each clock, the two workers' batches one after the
// other, both on two real servers. After a few clocks the rows and the dense
// tensors agree up to float summation order, for every sparse optimizer. And
// one clock of SGD equals its double-precision reference: the initial row
// minus the rate times the two workers' row gradients summed and divided by
// the number of workers (a row only one worker read included).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/criteo_reader.h"
#include "gtest/gtest.h"
#include "tests/testing/ctr_training.h"
#include "tests/testing/scoped_temp_dir.h"
#include "worker/batcher.h"

namespace ps {
namespace {

using testing::CtrJob;
using testing::CtrJobOptions;
using testing::CtrServers;
using testing::CtrTestWorker;

constexpr int kBatch = 32;
constexpr int kClocks = 8;
constexpr int kWorkers = 2;
constexpr int kRows = kWorkers * kBatch * kClocks;
constexpr uint64_t kSeed = 9;

// The dense tensors and the rows of every training id, after a job.
struct Trained {
  std::vector<std::vector<float>> initial_params, initial_rows;
  std::vector<std::vector<float>> params, rows;
};

v1::SparseOptimizerSpec TableOptimizer(const std::string& name) {
  v1::SparseOptimizerSpec o;
  if (name == "sgd") {
    o.mutable_sgd()->set_learning_rate(0.1f);
  } else if (name == "adagrad") {
    o.mutable_adagrad()->set_learning_rate(0.05f);
  } else if (name == "rowwise_adagrad") {
    o.mutable_rowwise_adagrad()->set_learning_rate(0.05f);
  } else if (name == "sgd_min_count_2") {
    // Admission counts updates: one per clock under BSP, however many
    // workers pushed the id.
    o.mutable_sgd()->set_learning_rate(0.1f);
  } else if (name == "lazy_adam") {
    o.mutable_lazy_adam()->set_learning_rate(0.01f);
  } else {
    o.mutable_ftrl()->set_alpha(0.1f);
    o.mutable_ftrl()->set_l1(0.001f);
    o.mutable_ftrl()->set_l2(0.001f);
  }
  return o;
}

v1::OptimizerSpec DenseSgd(float rate) {
  v1::OptimizerSpec o;
  o.mutable_sgd()->set_learning_rate(rate);
  return o;
}

class CtrBspFixture {
 protected:
  void WriteData() {
    lines_ = testing::SyntheticCriteoLines(kRows, 31);
    testing::WriteLines(Path("train2.tsv"), lines_);
    testing::WriteLines(Path("test.tsv"),
                        testing::SyntheticCriteoLines(64, 32));
    auto data = ReadCriteoFile(Path("train2.tsv"));
    PS_CHECK(data.ok());
    train_ = *std::move(data);
    ids_ = testing::DistinctIds(train_);
  }
  std::string Path(const std::string& name) const { return dir_.File(name); }

  // Writes the lines for one worker of batch 2b: its epoch order (of its
  // DataPartition) meets, at clock c, worker 0's batch c and then worker
  // 1's, as the two workers deal them out: worker w trains the file's
  // samples w, w + 2, ... (its CriteoShard) in its shard's epoch order.
  void WriteOneWorkerFile() {
    auto shard = DataPartition::Create(kRows / kWorkers, 1);
    auto one = DataPartition::Create(kRows, 1);
    PS_CHECK(shard.ok() && one.ok());
    const std::vector<int64_t> order_one = one->EpochOrder(kSeed, 0, 0);
    const std::vector<int64_t> order = shard->EpochOrder(kSeed, 0, 0);
    std::vector<std::string> lines(kRows);
    for (int w = 0; w < kWorkers; ++w) {
      const CriteoShard of_w = {.part = w, .num_parts = kWorkers};
      for (int c = 0; c < kClocks; ++c) {
        for (int j = 0; j < kBatch; ++j) {
          lines[order_one[c * kWorkers * kBatch + w * kBatch + j]] =
              lines_[of_w.SourceSample(order[c * kBatch + j])];
        }
      }
    }
    testing::WriteLines(Path("train1.tsv"), lines);
  }

  // Trains `spec` on two servers (memory stores) with its workers, whose
  // options are `options`; reads the model at `clocks`.
  Trained Train(const v1::JobSpec& spec,
                const TrainerOptions& options = TrainerOptions(),
                int64_t clocks = kClocks) {
    CtrServers servers(2, "");
    const v1::Assignment a = servers.Assign(spec, "job-bsp");
    Trained out;
    EXPECT_TRUE(CtrTestWorker(a, 0)
                    .PullModel(0, ids_, &out.initial_params, &out.initial_rows)
                    .ok());
    for (const absl::Status& s : testing::RunTrainers(a, nullptr, options)) {
      EXPECT_TRUE(s.ok()) << s;
    }
    EXPECT_TRUE(CtrTestWorker(a, 0)
                    .PullModel(clocks, ids_, &out.params, &out.rows)
                    .ok());
    return out;
  }

  testing::ScopedTempDir dir_{"ctr_bsp"};
  std::vector<std::string> lines_;
  CtrDataset train_;
  std::vector<std::vector<uint64_t>> ids_;
};

// Largest |a - b| over all values, and over |a - initial|.
struct Differences {
  double apart = 0;
  double moved = 0;
};
Differences Compare(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b,
                    const std::vector<std::vector<float>>& initial) {
  Differences d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    EXPECT_EQ(a[t].size(), b[t].size());
    for (size_t i = 0; i < a[t].size() && i < b[t].size(); ++i) {
      d.apart = std::max<double>(d.apart, std::fabs(a[t][i] - b[t][i]));
      d.moved = std::max<double>(d.moved, std::fabs(b[t][i] - initial[t][i]));
    }
  }
  return d;
}

class SparseBspEquivalenceTest : public CtrBspFixture,
                                 public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { WriteData(); }
};

// Tolerance. The two runs differ only in float summation order: worker w's
// gradient is a mean over b samples, the server adds the two and halves;
// the one worker's is a mean over 2b. That moves a gradient by a few ulps
// (relative ~1e-7). SGD's step is linear in it; the Adagrad family, Adam and
// FTRL divide by a root of the squared gradients, so a relative error of g
// stays a relative error of a step of at most ~lr; over 4 clocks and through
// the forward pass of the next clocks this stays near 1e-7 of a parameter.
// Measured (this test's printout), rows: 3.0e-8 sgd, 1.5e-7 adagrad, 8.9e-8
// row-wise Adagrad, 8.9e-8 lazy Adam, 3.7e-9 FTRL, 3.0e-8 sgd with
// admission; dense tensors 3e-8 to 6e-8. We allow 1e-5, over 60 times the
// largest, yet far below the parameters' own change (checked, over 1e-3), so
// a missed, doubled or wrongly averaged row gradient (a change of order lr
// times the gradient) fails.
constexpr double kTolerance = 1e-5;

TEST_P(SparseBspEquivalenceTest, TwoWorkersEqualOneBigBatch) {
  WriteOneWorkerFile();
  CtrJobOptions options{.train_file = Path("train2.tsv"),
                        .test_file = Path("test.tsv"),
                        .table_optimizer = TableOptimizer(GetParam()),
                        .optimizer = DenseSgd(0.1f),
                        .batch_size = kBatch,
                        .num_workers = kWorkers,
                        .seed = kSeed};
  const auto spec = [&] {
    v1::JobSpec spec = CtrJob(options);
    if (std::string(GetParam()) == "sgd_min_count_2") {
      for (auto& table : *spec.mutable_model()->mutable_sparse_tables()) {
        table.mutable_admission()->set_min_count(2);
      }
    }
    return spec;
  };
  const Trained two = Train(spec());
  options.train_file = Path("train1.tsv");
  options.batch_size = kWorkers * kBatch;
  options.num_workers = 1;
  const Trained one = Train(spec());

  const Differences rows = Compare(two.rows, one.rows, one.initial_rows);
  const Differences dense = Compare(two.params, one.params, one.initial_params);
  std::printf(
      "%s: rows max |2 workers - 1| = %.3g (moved %.3g), dense %.3g (moved "
      "%.3g)\n",
      GetParam(), rows.apart, rows.moved, dense.apart, dense.moved);
  RecordProperty("rows_max_abs_difference", absl::StrCat(rows.apart));
  RecordProperty("dense_max_abs_difference", absl::StrCat(dense.apart));
  // The runs started alike, and training moved both far past the tolerance.
  EXPECT_EQ(two.initial_rows, one.initial_rows);
  EXPECT_EQ(two.initial_params, one.initial_params);
  EXPECT_GT(rows.moved, 100 * kTolerance);
  EXPECT_GT(dense.moved, 100 * kTolerance);
  EXPECT_LE(rows.apart, kTolerance);
  EXPECT_LE(dense.apart, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(SparseOptimizers, SparseBspEquivalenceTest,
                         ::testing::Values("sgd", "adagrad", "rowwise_adagrad",
                                           "lazy_adam", "ftrl",
                                           "sgd_min_count_2"),
                         [](const auto& info) { return info.param; });

class CtrPipelineTest : public CtrBspFixture, public ::testing::Test {
 protected:
  void SetUp() override { WriteData(); }
};

// The CTR step's pipeline (the next step's pull made before this step
// computes, this step's push waited for by the next) changes when calls
// travel, not what they carry: under BSP with two workers (the servers'
// sums of two pushes are the same in either order) the model after 3
// epochs of 8 clocks is the one of steps that pull, compute and push in
// turn, bit for bit; and both differ from the initial model.
TEST_F(CtrPipelineTest, PipelinedStepsEqualStepsInTurnBitForBit) {
  constexpr int kEpochs = 3;
  const v1::JobSpec spec = CtrJob({.train_file = Path("train2.tsv"),
                                   .test_file = Path("test.tsv"),
                                   .batch_size = kBatch,
                                   .epochs = kEpochs,
                                   .num_workers = kWorkers,
                                   .seed = kSeed});
  TrainerOptions in_turn;
  in_turn.overlap_push = false;
  in_turn.prefetch_pull = false;
  const Trained pipelined =
      Train(spec, TrainerOptions(), int64_t{kEpochs} * kClocks);
  const Trained serial = Train(spec, in_turn, int64_t{kEpochs} * kClocks);
  EXPECT_EQ(pipelined.initial_rows, serial.initial_rows);
  EXPECT_NE(pipelined.rows, pipelined.initial_rows);
  EXPECT_NE(pipelined.params, pipelined.initial_params);
  EXPECT_EQ(pipelined.rows, serial.rows);
  EXPECT_EQ(pipelined.params, serial.params);
}

class SparseBspReferenceTest : public CtrBspFixture, public ::testing::Test {
 protected:
  void SetUp() override { WriteData(); }
};

// Per id: the row gradient a worker pushed.
using RowGrads = absl::flat_hash_map<uint64_t, std::vector<float>>;
using Workers = std::vector<std::unique_ptr<CtrTestWorker>>;

constexpr float kRate = 0.1f;

// |server - reference| for a value of the initial value p and step s: the
// server's float32 sum of two gradients, product with the rate and
// subtraction each round once (half an ulp each), so it is within a few ulps
// of |p| + |s|.
double Bound(double p, double s) {
  return 4 * 0x1.0p-24 * (std::fabs(p) + std::fabs(s)) + 1e-30;
}

// Dense: p - lr (g0 + g1) / 2, in double, from what the workers pulled and
// computed at clock 0. Returns the largest step.
double ExpectDenseReference(const Workers& workers,
                            const std::vector<std::vector<float>>& params) {
  const auto& p0 = workers[0]->params();
  EXPECT_EQ(p0, workers[1]->params());
  double moved = 0;
  int64_t off = 0;  // Values off the reference (the first one reported).
  for (size_t t = 0; t < params.size(); ++t) {
    for (size_t i = 0; i < params[t].size(); ++i) {
      const double g = (double{workers[0]->grads()[t][i]} +
                        double{workers[1]->grads()[t][i]}) /
                       kWorkers;
      const double step = double{kRate} * g;
      const double reference = double{p0[t][i]} - step;
      if (std::fabs(params[t][i] - reference) > Bound(p0[t][i], step) &&
          off++ == 0) {
        ADD_FAILURE() << "tensor " << t << " value " << i << ": "
                      << params[t][i] << ", reference " << reference;
      }
      moved = std::max(moved, std::fabs(step));
    }
  }
  EXPECT_EQ(off, 0) << "dense values off the reference";
  return moved;
}

// Rows of table t: the initial row minus lr (sum of the workers' row
// gradients) / 2, in double; a row one worker did not read has no gradient
// from it, and still the sum is divided by both. Counts the rows checked and
// those only one worker read; returns the largest step.
double ExpectRowsReference(const Workers& workers, size_t t, size_t dim,
                           const std::vector<uint64_t>& ids,
                           const std::vector<float>& rows, int64_t* checked,
                           int64_t* of_one_worker) {
  std::vector<RowGrads> grads(kWorkers);
  RowGrads initial;
  for (int w = 0; w < kWorkers; ++w) {
    const SparseStep& step = workers[w]->step();
    for (size_t i = 0; i < step.ids[t].size(); ++i) {
      const auto at = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + i * dim,
                                  v.begin() + (i + 1) * dim);
      };
      grads[w][step.ids[t][i]] = at(step.row_grads[t]);
      const auto [it, inserted] =
          initial.try_emplace(step.ids[t][i], at(step.rows[t]));
      EXPECT_EQ(it->second, at(step.rows[t]));  // Both pulled the same.
    }
  }
  double moved = 0;
  int64_t off = 0;  // Values off the reference (the first one reported).
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto init = initial.find(ids[i]);
    if (init == initial.end()) continue;  // Not in clock 0's batches.
    *of_one_worker += !grads[0].contains(ids[i]) || !grads[1].contains(ids[i]);
    for (size_t k = 0; k < dim; ++k) {
      double sum = 0;
      for (int w = 0; w < kWorkers; ++w) {
        if (auto g = grads[w].find(ids[i]); g != grads[w].end()) {
          sum += g->second[k];
        }
      }
      const double step = double{kRate} * sum / kWorkers;
      const double reference = double{init->second[k]} - step;
      if (std::fabs(rows[i * dim + k] - reference) >
              Bound(init->second[k], step) &&
          off++ == 0) {
        ADD_FAILURE() << "table " << t << " id " << ids[i] << " value " << k
                      << ": " << rows[i * dim + k] << ", reference "
                      << reference;
      }
      moved = std::max(moved, std::fabs(step));
    }
    ++*checked;
  }
  EXPECT_EQ(off, 0) << "values of table " << t << " off the reference";
  return moved;
}

TEST_F(SparseBspReferenceTest, OneSgdClockEqualsTheDoublePrecisionReference) {
  v1::SparseOptimizerSpec sgd;
  sgd.mutable_sgd()->set_learning_rate(kRate);
  const v1::JobSpec spec = CtrJob({.train_file = Path("train2.tsv"),
                                   .test_file = Path("test.tsv"),
                                   .table_optimizer = sgd,
                                   .optimizer = DenseSgd(kRate),
                                   .batch_size = kBatch,
                                   .num_workers = kWorkers,
                                   .seed = kSeed});
  CtrServers servers(2, "");
  const v1::Assignment a = servers.Assign(spec, "job-ref");
  // Clock 0 of both workers, by hand: worker w takes samples
  // [w b, (w + 1) b) of the file.
  Workers workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(std::make_unique<CtrTestWorker>(a, w));
  }
  std::vector<absl::Status> results(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      std::vector<int64_t> order(kBatch);
      for (int j = 0; j < kBatch; ++j) order[j] = w * kBatch + j;
      const testing::OwnedCtrBatch batch =
          testing::GatherCtrSamples(train_, order);
      results[w] = workers[w]->Step(0, batch.view()).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;

  std::vector<std::vector<float>> params, rows;
  ASSERT_TRUE(CtrTestWorker(a, 0).PullModel(1, ids_, &params, &rows).ok());
  const double dense_moved = ExpectDenseReference(workers, params);
  int64_t rows_checked = 0, rows_of_one_worker = 0;
  double rows_moved = 0;
  for (size_t t = 0; t < ids_.size(); ++t) {
    rows_moved = std::max(
        rows_moved, ExpectRowsReference(
                        workers, t, spec.model().sparse_tables(t).dim(),
                        ids_[t], rows[t], &rows_checked, &rows_of_one_worker));
  }
  std::printf(
      "checked %lld rows (%lld read by one worker only); largest step: "
      "dense %.3g, rows %.3g\n",
      static_cast<long long>(rows_checked),
      static_cast<long long>(rows_of_one_worker), dense_moved, rows_moved);
  EXPECT_GT(rows_of_one_worker, 0);
  EXPECT_GT(dense_moved, 1e-4);
  EXPECT_GT(rows_moved, 1e-4);
}

}  // namespace
}  // namespace ps

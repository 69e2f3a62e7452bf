// CtrModel on the CPU backend: gradients against finite differences of an
// independent double-precision reference, predictions, errors, and a real
// learning run on a synthetic click problem.
#include "worker/model/ctr_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/ctr_test_util.h"
#include "worker/model/cpu/cpu_backend.h"

namespace ps {
namespace {

using ctr_test::OwnedBatch;
using ctr_test::RandomBatch;
using ctr_test::RandomValues;
using ctr_test::RowSizes;
using ctr_test::TensorSizes;
using ctr_test::TinySpec;
using Values = std::vector<std::vector<double>>;

// The CTR model written out plainly in double precision, per sample, from
// the layout alone (not from CtrModel's code).
struct Reference {
  CtrLayout layout;
  const OwnedBatch* batch;
  const SparseBatch* sparse;

  // x W + b of one dense layer (weight [in, out] row-major), then ReLU.
  static std::vector<double> Dense(const std::vector<double>& x,
                                   const std::vector<double>& w,
                                   const std::vector<double>& b, bool relu) {
    std::vector<double> y(b);
    for (size_t i = 0; i < x.size(); ++i) {
      for (size_t o = 0; o < y.size(); ++o) y[o] += x[i] * w[i * y.size() + o];
    }
    if (relu) {
      for (double& v : y) v = std::max(v, 0.0);
    }
    return y;
  }

  double Logit(int s, const Values& params, const Values& rows) const {
    const int d = layout.dim;
    const int fields = layout.num_fields;
    size_t tensor = 0;
    std::vector<std::vector<double>> vectors;
    std::vector<double> x;
    if (layout.has_bottom()) {
      const int64_t in = layout.bottom_widths[0];
      std::vector<double> h(batch->dense.begin() + s * in,
                            batch->dense.begin() + (s + 1) * in);
      const size_t bottom_tensors = 2 * (layout.bottom_widths.size() - 1);
      for (; tensor < bottom_tensors; tensor += 2) {
        h = Dense(h, params[tensor], params[tensor + 1], true);
      }
      vectors.push_back(h);
      x = h;
    }
    for (int f = 0; f < fields; ++f) {
      const int t = layout.field_tables[f];
      const int64_t row = sparse->rows()[s * fields + f];
      vectors.emplace_back(rows[t].begin() + row * d,
                           rows[t].begin() + (row + 1) * d);
    }
    if (layout.dot) {
      for (size_t i = 0; i < vectors.size(); ++i) {
        for (size_t j = i + 1; j < vectors.size(); ++j) {
          double dot = 0;
          for (int k = 0; k < d; ++k) dot += vectors[i][k] * vectors[j][k];
          x.push_back(dot);
        }
      }
    } else {
      for (size_t v = layout.has_bottom() ? 1 : 0; v < vectors.size(); ++v) {
        x.insert(x.end(), vectors[v].begin(), vectors[v].end());
      }
    }
    for (; tensor < params.size(); tensor += 2) {
      x = Dense(x, params[tensor], params[tensor + 1],
                tensor + 2 < params.size());
    }
    return x[0];
  }

  double Loss(const Values& params, const Values& rows) const {
    double total = 0;
    for (int s = 0; s < batch->batch; ++s) {
      const double z = Logit(s, params, rows);
      const double y = batch->labels[s];
      total += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
    }
    return total / batch->batch;
  }
};

Values ToDouble(const std::vector<std::vector<float>>& v) {
  Values out;
  for (const auto& x : v) out.emplace_back(x.begin(), x.end());
  return out;
}

// Central differences of the reference loss in each value of `values`
// (params or rows, the other held fixed) against `got`.
void ExpectGradientsMatch(const Reference& ref, Values params, Values rows,
                          bool of_rows,
                          const std::vector<std::vector<float>>& got,
                          const std::vector<std::string>& names) {
  Values& values = of_rows ? rows : params;
  ASSERT_EQ(got.size(), values.size());
  const double eps = 1e-6;
  for (size_t t = 0; t < values.size(); ++t) {
    ASSERT_EQ(got[t].size(), values[t].size()) << names[t];
    for (size_t i = 0; i < values[t].size(); ++i) {
      const double saved = values[t][i];
      values[t][i] = saved + eps;
      const double up = ref.Loss(params, rows);
      values[t][i] = saved - eps;
      const double down = ref.Loss(params, rows);
      values[t][i] = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(got[t][i], numeric, 2e-5 + 1e-3 * std::abs(numeric))
          << names[t] << "[" << i << "]";
    }
  }
}

struct Case {
  std::string name;
  v1::CtrModelSpec::Interaction interaction;
  bool bottom;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class CtrGradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(CtrGradientTest, MatchesFiniteDifferencesOfDoubleReference) {
  std::unique_ptr<CpuBackend> cpu = CpuBackend::Create({});
  const v1::ModelSpec spec =
      TinySpec(GetParam().interaction, GetParam().bottom);
  auto model = CtrModel::Create(spec, cpu.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937 rng(11);
  const OwnedBatch batch = RandomBatch(6, 5, 3, &rng);
  const SparseBatch& sparse = (*model)->Prepare(batch.view());
  const auto params = RandomValues(TensorSizes(**model), 0.5f, &rng);
  const auto rows = RandomValues(RowSizes(**model, sparse), 0.5f, &rng);
  ASSERT_TRUE((*model)->SetParameters(params).ok());

  std::vector<std::vector<float>> grads, row_grads;
  absl::StatusOr<float> loss =
      (*model)->ComputeGradients(batch.view(), rows, &grads, &row_grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const Reference ref{(*model)->layout(), &batch, &sparse};
  EXPECT_NEAR(*loss, ref.Loss(ToDouble(params), ToDouble(rows)), 1e-5);

  std::vector<std::string> names;
  for (const TensorSpec& t : (*model)->tensors()) names.push_back(t.name);
  ExpectGradientsMatch(ref, ToDouble(params), ToDouble(rows), false, grads,
                       names);
  ExpectGradientsMatch(ref, ToDouble(params), ToDouble(rows), true, row_grads,
                       {"table0 rows", "table1 rows"});

  // Predict: sigmoid of the reference's logits.
  std::vector<float> probabilities(batch.batch);
  ASSERT_TRUE((*model)->Predict(batch.view(), rows, probabilities.data()).ok());
  for (int s = 0; s < batch.batch; ++s) {
    const double z = ref.Logit(s, ToDouble(params), ToDouble(rows));
    EXPECT_NEAR(probabilities[s], 1 / (1 + std::exp(-z)), 1e-6) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Interactions, CtrGradientTest,
    ::testing::Values(Case{"dot", v1::CtrModelSpec::DOT, true},
                      Case{"concat", v1::CtrModelSpec::CONCAT, true},
                      Case{"dot_no_bottom", v1::CtrModelSpec::DOT, false},
                      Case{"concat_no_bottom", v1::CtrModelSpec::CONCAT,
                           false}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(CtrModelTest, ErrorsAreInvalidArgument) {
  std::unique_ptr<CpuBackend> cpu = CpuBackend::Create({});
  auto model = CtrModel::Create(TinySpec(v1::CtrModelSpec::DOT), cpu.get());
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->num_tables(), 2);
  EXPECT_EQ((*model)->dim(1), 4);
  std::mt19937 rng(3);
  OwnedBatch batch = RandomBatch(4, 5, 3, &rng);
  const SparseBatch& sparse = (*model)->Prepare(batch.view());
  auto rows = RandomValues(RowSizes(**model, sparse), 0.1f, &rng);
  std::vector<std::vector<float>> grads, row_grads;
  ASSERT_TRUE(
      (*model)->ComputeGradients(batch.view(), rows, &grads, &row_grads).ok());

  auto expect_invalid = [&](const OwnedBatch& b,
                            const std::vector<std::vector<float>>& r,
                            const std::string& substring) {
    absl::StatusOr<float> loss =
        (*model)->ComputeGradients(b.view(), r, &grads, &row_grads);
    EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(loss.status().message(), ::testing::HasSubstr(substring));
  };
  auto short_rows = rows;
  short_rows[1].pop_back();
  expect_invalid(batch, short_rows, "rows of table 1");
  expect_invalid(batch, {rows[0]}, "rows of 1 tables");
  OwnedBatch bad_label = batch;
  bad_label.labels[2] = 2;
  expect_invalid(bad_label, rows, "label 2 of sample 2");
  OwnedBatch smaller = RandomBatch(3, 5, 3, &rng);
  expect_invalid(smaller, rows, "Prepare was given 4");
  std::vector<float> p(4);
  EXPECT_EQ((*model)->Predict(batch.view(), short_rows, p.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->SetParameters({{1.0f}}).code(),
            absl::StatusCode::kInvalidArgument);

  v1::ModelSpec bad = TinySpec(v1::CtrModelSpec::DOT);
  bad.set_num_classes(3);
  EXPECT_EQ(CtrModel::Create(bad, cpu.get()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A hidden logistic teacher: per-field id weights and dense weights; its
// samples' labels are drawn with the probability it gives.
struct Teacher {
  static constexpr int kFields = 3;
  static constexpr int kVocab = 20;
  static constexpr int kDense = 5;
  std::vector<std::vector<double>> id_weights;
  std::vector<double> dense_weights;

  explicit Teacher(std::mt19937* rng) {
    std::normal_distribution<double> normal(0, 1);
    id_weights.assign(kFields, std::vector<double>(kVocab));
    for (auto& field : id_weights) {
      for (double& w : field) w = 1.5 * normal(*rng);
    }
    dense_weights.resize(kDense);
    for (double& w : dense_weights) w = normal(*rng);
  }

  OwnedBatch Draw(int n, std::mt19937* rng) const {
    OwnedBatch b;
    b.batch = n;
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (int s = 0; s < n; ++s) {
      double logit = -0.5;
      for (int k = 0; k < kDense; ++k) {
        b.dense.push_back(uniform(*rng));
        logit += dense_weights[k] * b.dense.back();
      }
      for (int f = 0; f < kFields; ++f) {
        const int id = static_cast<int>((*rng)() % kVocab);
        b.ids.push_back(f * 1000 + id);
        logit += id_weights[f][id];
      }
      b.labels.push_back(
          std::bernoulli_distribution(1 / (1 + std::exp(-logit)))(*rng));
    }
    return b;
  }
};

// Sparse tables on the host, rows created on first pull (U(-0.5, 0.5)) and
// changed by SGD on push: what the servers do, in miniature.
struct HostTables {
  std::vector<std::map<uint64_t, std::vector<float>>> rows;
  int dim;

  std::vector<std::vector<float>> Pull(const SparseBatch& sparse,
                                       std::mt19937* rng) {
    std::uniform_real_distribution<float> init(-0.5f, 0.5f);
    std::vector<std::vector<float>> out(rows.size());
    for (size_t t = 0; t < rows.size(); ++t) {
      for (uint64_t id : sparse.unique_ids(static_cast<int>(t))) {
        auto [it, added] = rows[t].try_emplace(id);
        if (added) {
          for (int k = 0; k < dim; ++k) it->second.push_back(init(*rng));
        }
        out[t].insert(out[t].end(), it->second.begin(), it->second.end());
      }
    }
    return out;
  }

  void Push(const SparseBatch& sparse,
            const std::vector<std::vector<float>>& grads, float lr) {
    for (size_t t = 0; t < rows.size(); ++t) {
      const std::vector<uint64_t>& ids = sparse.unique_ids(static_cast<int>(t));
      for (size_t r = 0; r < ids.size(); ++r) {
        std::vector<float>& row = rows[t][ids[r]];
        for (int k = 0; k < dim; ++k) row[k] -= lr * grads[t][r * dim + k];
      }
    }
  }
};

// The model, trained with plain SGD on the teacher's samples (dense
// parameters and the rows it pulls, as a worker would), must get well below
// the loss of predicting the base rate. A learning check, not a timing one.
TEST(CtrModelTest, LearnsASyntheticClickProblem) {
  std::unique_ptr<CpuBackend> cpu = CpuBackend::Create({});
  v1::ModelSpec spec = TinySpec(v1::CtrModelSpec::DOT);
  spec.mutable_ctr()->clear_field_tables();
  spec.add_sparse_tables()->set_dim(4);  // 3 tables, one per field.
  auto model = CtrModel::Create(spec, cpu.get());
  ASSERT_TRUE(model.ok()) << model.status();

  std::mt19937 rng(7);
  const Teacher teacher(&rng);
  std::vector<std::vector<float>> params;
  for (size_t i = 0; i < (*model)->tensors().size(); ++i) {
    const TensorSpec& t = (*model)->tensors()[i];
    params.push_back(InitialBlockValues(
        t, {BlockKey(i, 0), static_cast<uint32_t>(i), 0, t.num_elems()}, 1));
  }
  HostTables tables{std::vector<std::map<uint64_t, std::vector<float>>>(3), 4};
  const float lr = 0.1f;
  std::vector<float> losses;
  int positives = 0, samples = 0;
  for (int step = 0; step < 600; ++step) {
    const OwnedBatch batch = teacher.Draw(64, &rng);
    const SparseBatch& sparse = (*model)->Prepare(batch.view());
    const std::vector<std::vector<float>> rows = tables.Pull(sparse, &rng);
    ASSERT_TRUE((*model)->SetParameters(params).ok());
    std::vector<std::vector<float>> grads, row_grads;
    absl::StatusOr<float> loss =
        (*model)->ComputeGradients(batch.view(), rows, &grads, &row_grads);
    ASSERT_TRUE(loss.ok()) << loss.status();
    losses.push_back(*loss);
    for (size_t i = 0; i < params.size(); ++i) {
      for (size_t j = 0; j < params[i].size(); ++j) {
        params[i][j] -= lr * grads[i][j];
      }
    }
    // A mean loss spreads each row's gradient thin: rows take a larger step.
    tables.Push(sparse, row_grads, 10 * lr);
    for (int32_t y : batch.labels) positives += y;
    samples += batch.batch;
  }
  const double p = static_cast<double>(positives) / samples;
  const double base_rate_loss = -(p * std::log(p) + (1 - p) * std::log(1 - p));
  double first = 0, last = 0;
  for (int i = 0; i < 50; ++i) first += losses[i] / 50;
  for (int i = 0; i < 100; ++i) last += losses[losses.size() - 1 - i] / 100;
  // Measured: first 0.684, last 0.410, base rate 0.673.
  EXPECT_LT(last, base_rate_loss - 0.1)
      << "first " << first << " base rate " << base_rate_loss;
  EXPECT_LT(last, first - 0.1);
}

}  // namespace
}  // namespace ps

// Shared by the CTR model's tests: small specs, random batches and rows.
#ifndef PS_TESTS_UNIT_WORKER_CTR_TEST_UTIL_H_
#define PS_TESTS_UNIT_WORKER_CTR_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ps/v1/job.pb.h"
#include "worker/model/ctr_model.h"

namespace ps::ctr_test {

// A tiny CTR spec: 3 fields of dim 4 reading tables {0, 1, 0} of 2 (fields
// 0 and 2 share a table), input_dim 5, bottom [8, 4] (or none), top [8].
inline v1::ModelSpec TinySpec(v1::CtrModelSpec::Interaction interaction,
                              bool bottom = true) {
  v1::ModelSpec model;
  model.set_kind(v1::ModelSpec::CTR);
  model.set_input_dim(5);
  model.set_num_classes(2);
  for (int t = 0; t < 2; ++t) {
    v1::SparseTableSpec* table = model.add_sparse_tables();
    table->set_name("table" + std::to_string(t));
    table->set_dim(4);
  }
  v1::CtrModelSpec* ctr = model.mutable_ctr();
  ctr->set_num_fields(3);
  for (int t : {0, 1, 0}) ctr->add_field_tables(t);
  if (bottom) {
    ctr->add_bottom_mlp(8);
    ctr->add_bottom_mlp(4);
  }
  ctr->add_top_mlp(8);
  ctr->set_interaction(interaction);
  return model;
}

// A batch with its storage.
struct OwnedBatch {
  std::vector<float> dense;
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  int batch = 0;

  CtrBatch view() const {
    return {batch, dense.data(), ids.data(), labels.data()};
  }
};

// `batch` samples with dense values in [-1, 1], ids from a few values (so
// ids repeat within the batch and across fields sharing a table) and
// alternating-ish labels.
inline OwnedBatch RandomBatch(int batch, int input_dim, int fields,
                              std::mt19937* rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  OwnedBatch b;
  b.batch = batch;
  b.dense.resize(static_cast<size_t>(batch) * input_dim);
  for (float& v : b.dense) v = value(*rng);
  b.ids.resize(static_cast<size_t>(batch) * fields);
  for (uint64_t& id : b.ids) id = 1000 + (*rng)() % 4;
  for (int i = 0; i < batch; ++i) b.labels.push_back(((*rng)() % 3) == 0);
  return b;
}

// Values in [-scale, scale] for each tensor, or each table's unique rows.
inline std::vector<std::vector<float>> RandomValues(
    const std::vector<int64_t>& sizes, float scale, std::mt19937* rng) {
  std::uniform_real_distribution<float> value(-scale, scale);
  std::vector<std::vector<float>> out;
  for (int64_t n : sizes) {
    out.emplace_back(n);
    for (float& v : out.back()) v = value(*rng);
  }
  return out;
}

inline std::vector<int64_t> TensorSizes(const CtrModel& model) {
  std::vector<int64_t> sizes;
  for (const TensorSpec& t : model.tensors()) sizes.push_back(t.num_elems());
  return sizes;
}

inline std::vector<int64_t> RowSizes(const CtrModel& model,
                                     const SparseBatch& sparse) {
  std::vector<int64_t> sizes;
  for (int t = 0; t < model.num_tables(); ++t) {
    sizes.push_back(static_cast<int64_t>(sparse.unique_ids(t).size()) *
                    model.dim(t));
  }
  return sizes;
}

}  // namespace ps::ctr_test

#endif  // PS_TESTS_UNIT_WORKER_CTR_TEST_UTIL_H_

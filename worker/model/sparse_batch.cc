#include "worker/model/sparse_batch.h"

#include "common/logging.h"

namespace ps {

void SparseBatch::Build(const uint64_t* ids, int batch,
                        const std::vector<int>& field_tables, int num_tables) {
  PS_CHECK(batch >= 0 && num_tables >= 0, "SparseBatch::Build(batch ", batch,
           ", tables ", num_tables, ")");
  const int fields = static_cast<int>(field_tables.size());
  for (int t : field_tables) {
    PS_CHECK(t >= 0 && t < num_tables, "field table ", t, " out of [0, ",
             num_tables, ")");
  }
  batch_ = batch;
  num_fields_ = fields;
  index_.resize(num_tables);
  unique_.resize(num_tables);
  for (int t = 0; t < num_tables; ++t) {
    // clear() frees a large table's array; reserving last batch's size
    // again saves the rehashes of growing it back.
    const size_t last = index_[t].size();
    index_[t].clear();
    index_[t].reserve(last);
    unique_[t].clear();
  }
  rows_.resize(static_cast<size_t>(batch) * fields);
  for (int64_t i = 0; i < int64_t{batch} * fields; ++i) {
    const int t = field_tables[i % fields];
    std::vector<uint64_t>& unique = unique_[t];
    const auto [it, inserted] =
        index_[t].try_emplace(ids[i], static_cast<int32_t>(unique.size()));
    if (inserted) unique.push_back(ids[i]);
    rows_[i] = it->second;
  }
  offsets_.resize(num_tables + 1);
  offsets_[0] = 0;
  for (int t = 0; t < num_tables; ++t) {
    offsets_[t + 1] = offsets_[t] + static_cast<int64_t>(unique_[t].size());
  }
}

}  // namespace ps

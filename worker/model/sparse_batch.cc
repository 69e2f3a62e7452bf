#include "worker/model/sparse_batch.h"

#include <algorithm>
#include <bit>

#include "common/logging.h"

namespace ps {

int32_t SparseBatch::RowOf(int t, uint64_t id) {
  Index& index = index_[t];
  const size_t mask = index.slots.size() - 1;
  // Fibonacci hashing: the product's high bits.
  size_t at = static_cast<size_t>((id * 0x9E3779B97F4A7C15ull) >> index.shift);
  while (true) {
    Slot& slot = index.slots[at];
    if (slot.generation != generation_) {
      std::vector<uint64_t>& unique = unique_[t];
      slot = {.id = id,
              .row = static_cast<int32_t>(unique.size()),
              .generation = generation_};
      unique.push_back(id);
      return slot.row;
    }
    if (slot.id == id) return slot.row;
    at = (at + 1) & mask;
  }
}

void SparseBatch::ReadFields(const uint64_t* ids,
                             const std::vector<int>& field_tables) {
  const int fields = num_fields_;
  for (int f = 0; f < fields; ++f) {
    const int t = field_tables[f];
    if (readers_[t] == 1) {
      // The table's only field: its column, in sample order (the same
      // first appearances as row-major order), one index hot at a time.
      for (int64_t b = 0; b < batch_; ++b) {
        const int64_t i = b * fields + f;
        rows_[i] = RowOf(t, ids[i]);
      }
      continue;
    }
    // Fields sharing a table: all of them at the first one, in row-major
    // order, where their ids first appear.
    if (readers_[t] < 0) continue;  // Read already.
    readers_[t] = -1;
    for (int64_t b = 0; b < batch_; ++b) {
      for (int g = 0; g < fields; ++g) {
        const int64_t i = b * fields + g;
        if (field_tables[g] == t) rows_[i] = RowOf(t, ids[i]);
      }
    }
  }
}

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
  readers_.assign(num_tables, 0);
  for (int t : field_tables) ++readers_[t];
  if (++generation_ == 0) {
    // Wrapped around: slots of 2^32 batches ago would read as this one's.
    for (Index& index : index_)
      std::fill(index.slots.begin(), index.slots.end(), Slot{});
    generation_ = 1;
  }
  for (int t = 0; t < num_tables; ++t) {
    unique_[t].clear();
    // At most half full: room for twice the reads of the batch.
    const size_t want = std::bit_ceil(
        std::max<size_t>(16, 2 * static_cast<size_t>(batch) * readers_[t]));
    Index& index = index_[t];
    if (readers_[t] > 0 && index.slots.size() < want) {
      index.slots.assign(want, Slot{});
      index.shift = 64 - std::countr_zero(want);
    }
  }
  rows_.resize(static_cast<size_t>(batch) * fields);
  ReadFields(ids, field_tables);
  offsets_.resize(num_tables + 1);
  offsets_[0] = 0;
  for (int t = 0; t < num_tables; ++t) {
    offsets_[t + 1] = offsets_[t] + static_cast<int64_t>(unique_[t].size());
  }
}

}  // namespace ps

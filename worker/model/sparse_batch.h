// A batch's sparse ids deduplicated per table: the rows a worker pulls (each
// id once) and how each (sample, field) maps back to its row
// (docs/sparse.md, "The CTR model").
#ifndef PS_WORKER_MODEL_SPARSE_BATCH_H_
#define PS_WORKER_MODEL_SPARSE_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ps {

// The unique ids of one batch per table and the row of each (sample,
// field). Build reuses the object's buffers (hash maps and vectors keep
// their capacity), so one object per trainer serves every batch.
// Not thread-safe.
class SparseBatch {
 public:
  // Rebuilds from `ids`, row-major [batch x num_fields] (one id per field
  // per sample; a missing value is an id of its own), where field f reads
  // table field_tables[f] (each in [0, num_tables)). Ids are per table: two
  // fields sharing a table and an id share the row (the data reader mixes
  // the field into the id when fields must not share). A table no field
  // reads gets no ids. batch >= 0; violations of the ranges are programmer
  // errors (checked).
  void Build(const uint64_t* ids, int batch,
             const std::vector<int>& field_tables, int num_tables);

  int batch() const { return batch_; }
  int num_fields() const { return num_fields_; }
  int num_tables() const { return static_cast<int>(unique_.size()); }

  // Table t's distinct ids in the order they first appear in the batch
  // (row-major: sample 0's fields, then sample 1's, ...).
  const std::vector<uint64_t>& unique_ids(int table) const {
    return unique_[table];
  }

  // rows()[b * num_fields + f]: the index of sample b's field f id among
  // unique_ids(field_tables[f]).
  const std::vector<int32_t>& rows() const { return rows_; }

  // The unique ids of all tables together, and where table t's start when
  // the tables' rows are stacked in table order (offset(num_tables()) is the
  // total).
  int64_t total_unique() const { return offsets_.back(); }
  int64_t offset(int table) const { return offsets_[table]; }

 private:
  int batch_ = 0;
  int num_fields_ = 0;
  std::vector<absl::flat_hash_map<uint64_t, int32_t>> index_;  // Per table.
  std::vector<std::vector<uint64_t>> unique_;                  // Per table.
  std::vector<int32_t> rows_;
  std::vector<int64_t> offsets_ = {0};
};

}  // namespace ps

#endif  // PS_WORKER_MODEL_SPARSE_BATCH_H_

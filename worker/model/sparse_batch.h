// A batch's sparse ids deduplicated per table: the rows a worker pulls (each
// id once) and how each (sample, field) maps back to its row
// (docs/sparse.md, "The CTR model").
#ifndef PS_WORKER_MODEL_SPARSE_BATCH_H_
#define PS_WORKER_MODEL_SPARSE_BATCH_H_

#include <cstdint>
#include <vector>

namespace ps {

// The unique ids of one batch per table and the row of each (sample,
// field). Build reuses the object's buffers (its hash tables and vectors
// keep their capacity and are not cleared between batches: a generation
// stamp marks a slot as this batch's), so one object per trainer serves
// every batch. Not thread-safe.
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
  // One table's index of its ids: open addressing, linear probing, at most
  // half full (sized for every read of the batch).
  struct Slot {
    uint64_t id = 0;
    int32_t row = 0;
    uint32_t generation = 0;  // The Build that wrote it (0: none).
  };
  struct Index {
    std::vector<Slot> slots;  // A power of two of them.
    int shift = 64;           // 64 - log2(slots.size()).
  };
  // The row of `id` in table t (a new one if the batch had not read it).
  int32_t RowOf(int t, uint64_t id);
  // Fills rows_ and unique_ from the batch's ids (a field's column at a
  // time where no other field shares its table). Leaves readers_[t] < 0
  // for the shared tables.
  void ReadFields(const uint64_t* ids, const std::vector<int>& field_tables);

  int batch_ = 0;
  int num_fields_ = 0;
  uint32_t generation_ = 0;
  std::vector<Index> index_;                   // Per table.
  std::vector<std::vector<uint64_t>> unique_;  // Per table.
  std::vector<int> readers_;  // Per table: the fields reading it.
  std::vector<int32_t> rows_;
  std::vector<int64_t> offsets_ = {0};
};

}  // namespace ps

#endif  // PS_WORKER_MODEL_SPARSE_BATCH_H_

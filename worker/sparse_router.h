// Where a job's sparse rows live, from the worker's side: each table's
// buckets on the servers of the shard map (common/sparse_keys.h), and one
// step's ids cut into what each server is asked for.
#ifndef PS_WORKER_SPARSE_ROUTER_H_
#define PS_WORKER_SPARSE_ROUTER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/cluster.pb.h"

namespace ps {

// One step's rows of the job's sparse tables (docs/sparse.md, "Wire").
struct SparseStep {
  // Per table of the job (model.sparse_tables order): the ids the step reads
  // and writes, each once.
  std::vector<std::vector<uint64_t>> ids;
  // Per table: the pulled rows, ids[t].size() * dim values (a pull fills it).
  std::vector<std::vector<float>> rows;
  // Per table: the rows' gradients, in rows' layout (a push reads it).
  std::vector<std::vector<float>> row_grads;
};

// The ids one server is asked for, of one table.
struct SparsePart {
  uint32_t table = 0;
  std::vector<uint64_t> ids{};
  std::vector<uint32_t> positions{};  // Of each id in SparseStep::ids[table].
};

// Immutable after Create; thread-safe.
class SparseRouter {
 public:
  // The buckets of every table of `assignment`'s spec, from its shard map.
  // Errors: INVALID_ARGUMENT when a bucket has no server (or an unknown one)
  // or a table's num_buckets is not a power of two.
  static absl::StatusOr<SparseRouter> Create(const v1::Assignment& assignment);

  size_t num_tables() const { return tables_.size(); }
  int dim(size_t table) const { return tables_[table].dim; }
  // The largest dim of any table (0 without tables).
  int max_dim() const;

  // `ids` (per table, as SparseStep::ids) cut per server: result[s] lists
  // the tables with ids on server s, in table order. Errors:
  // INVALID_ARGUMENT when ids has more entries than the job has tables.
  absl::StatusOr<std::vector<std::vector<SparsePart>>> Route(
      std::span<const std::vector<uint64_t>> ids, size_t num_servers) const;

 private:
  struct Table {
    int dim = 0;
    uint32_t num_buckets = 0;
    std::vector<int32_t> server;  // By bucket.
  };
  std::vector<Table> tables_;
};

}  // namespace ps

#endif  // PS_WORKER_SPARSE_ROUTER_H_

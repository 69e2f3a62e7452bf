// ServerJob's initial values from a model file (JobSpec.init_from,
// docs/model-format.md, "Starting a job from a model file"), and the
// snapshot of its rows that an export reads.
#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/model_file.h"
#include "common/model_layout.h"
#include "common/model_tables.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "server/server_job.h"
#include "server/sparse_bucket_codec.h"
#include "server/sparse_optimizer.h"

namespace ps {
namespace {

// One table's rows of this server's buckets, gathered from the file: per
// bucket, (id, index of its row in `values`).
struct TableLoad {
  int dim = 0;
  uint32_t num_buckets = 1;
  std::map<uint32_t, std::vector<std::pair<uint64_t, size_t>>> buckets;
  std::vector<float> values;
};

// The bucket of `load` as a snapshot stores it: ids ascending, the file's
// values and zero optimizer state (a new row's), last updated at clock 0
// and counted as updated once (the load: a stored row has had an update,
// and SparseTable::Restore checks it). INVALID_ARGUMENT for an id twice.
absl::StatusOr<StoredBlock> EncodeBucket(
    uint32_t table, const std::string& name, uint32_t bucket,
    std::vector<std::pair<uint64_t, size_t>>& rows, const TableLoad& load,
    const SparseOptimizer& optimizer) {
  std::sort(rows.begin(), rows.end());
  StoredBlock block;
  block.key = BucketKey(table, bucket);
  const int state = optimizer.state_floats();
  AppendSparseBucketHeader(static_cast<uint8_t>(optimizer.kind()), load.dim,
                           state, static_cast<uint32_t>(rows.size()), 0,
                           &block.rows);
  std::vector<float> row(load.dim + state, 0.0f);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0 && rows[i].first == rows[i - 1].first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "init_from: table ", name, " holds id ", rows[i].first, " twice"));
    }
    std::copy_n(load.values.begin() + rows[i].second * load.dim, load.dim,
                row.begin());
    AppendSparseBucketRow(rows[i].first, /*last_clock=*/0,
                          /*update_count=*/1, row.data(), row.size(),
                          &block.rows);
  }
  return block;
}

// Reads the table section of `path` a chunk at a time into `tables`,
// keeping the rows of the buckets in `held` (bucket keys; each table's
// bucket from its num_buckets in `spec`); returns the rows kept.
absl::StatusOr<int64_t> GatherRows(const std::string& path,
                                   const v1::JobSpec& spec,
                                   const absl::flat_hash_set<uint64_t>& held,
                                   std::vector<TableLoad>* tables) {
  tables->assign(spec.model().sparse_tables_size(), TableLoad());
  for (size_t t = 0; t < tables->size(); ++t) {
    (*tables)[t].dim = spec.model().sparse_tables(t).dim();
    (*tables)[t].num_buckets = spec.model().sparse_tables(t).num_buckets();
  }
  PS_ASSIGN_OR_RETURN(auto reader, ModelTableReader::Open(path));
  int64_t rows = 0;
  TableChunk chunk;
  while (true) {
    PS_ASSIGN_OR_RETURN(const bool more, reader->Next(&chunk));
    if (!more) return rows;
    TableLoad& load = (*tables)[chunk.table];
    if (!AllFinite(chunk.values)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "init_from: table ", spec.model().sparse_tables(chunk.table).name(),
          " holds a NaN or Inf value"));
    }
    for (size_t i = 0; i < chunk.ids.size(); ++i) {
      const uint32_t bucket =
          BucketOfId(chunk.ids[i], chunk.table, load.num_buckets);
      if (!held.contains(BucketKey(chunk.table, bucket))) continue;
      load.buckets[bucket].emplace_back(chunk.ids[i],
                                        load.values.size() / load.dim);
      load.values.insert(load.values.end(), chunk.values.begin() + i * load.dim,
                         chunk.values.begin() + (i + 1) * load.dim);
      ++rows;
    }
  }
}

}  // namespace

std::vector<StoredBlock> ServerJob::SparseSnapshot() const {
  absl::MutexLock lock(&mu_);
  return sparse_->Snapshot();
}

absl::Status ServerJob::LoadInitialModel() {
  const v1::JobSpec& spec = assignment_.spec();
  const std::string& path = spec.init_from();
  ModelFileLayout layout;
  PS_ASSIGN_OR_RETURN(const v1::TrainedModel file,
                      ReadModelFile(path, &layout));
  PS_RETURN_IF_ERROR(CheckModelFitsJob(file, spec));
  PS_ASSIGN_OR_RETURN(const std::vector<TensorSpec> tensors,
                      ModelTensors(spec.model()));
  std::map<uint64_t, BlockSpec> block_specs;
  for (const BlockSpec& b : SplitIntoBlocks(tensors, spec.block_elems())) {
    block_specs[b.key] = b;
  }
  // The buckets this server holds, and the tables' rows of them.
  absl::flat_hash_set<uint64_t> held;
  for (const v1::BlockPlacement& p : assignment_.shard_map().blocks()) {
    if (p.server() == assignment_.index() && IsBucketKey(p.key())) {
      held.insert(p.key());
    }
  }
  std::vector<TableLoad> tables;
  int64_t rows = 0;
  if (layout.has_tables) {
    PS_ASSIGN_OR_RETURN(rows, GatherRows(path, spec, held, &tables));
  }

  absl::MutexLock lock(&mu_);
  // Dense: the blocks as they are (initial values, fresh optimizer state),
  // their values replaced by the file's.
  std::vector<StoredBlock> blocks = table_->Snapshot();
  for (StoredBlock& b : blocks) {
    const BlockSpec& where = block_specs.at(b.key);
    const std::string& data = file.tensors(where.tensor_index).data();
    const float* from = reinterpret_cast<const float*>(data.data());
    b.values.assign(from + where.offset, from + where.offset + where.num_elems);
    if (!AllFinite(b.values)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "init_from: tensor ", file.tensors(where.tensor_index).name(),
          " holds a NaN or Inf value"));
    }
  }
  PS_RETURN_IF_ERROR(table_->Restore(std::move(blocks)));
  for (size_t t = 0; t < tables.size(); ++t) {
    const v1::SparseTableSpec& table_spec = spec.model().sparse_tables(t);
    PS_ASSIGN_OR_RETURN(
        const SparseOptimizer optimizer,
        SparseOptimizer::Create(table_spec.optimizer(), table_spec.dim()));
    for (auto& [bucket, ids] : tables[t].buckets) {
      PS_ASSIGN_OR_RETURN(
          StoredBlock block,
          EncodeBucket(static_cast<uint32_t>(t), table_spec.name(), bucket, ids,
                       tables[t], optimizer));
      PS_RETURN_IF_ERROR(sparse_->Restore(block));
    }
    tables[t] = TableLoad();  // Free as we go.
  }
  PS_LOG_INFO("job ", job_id_, ": initial values from ", path, ": ",
              table_->size(), " blocks and ", rows, " sparse rows");
  return absl::OkStatus();
}

}  // namespace ps

#include "server/sparse_table_set.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/sparse_memory.h"
#include "common/sparse_spec.h"
#include "common/status_macros.h"
#include "server/sparse_snapshot_stream.h"
#include "server/update_log_writer.h"

namespace ps {
namespace {

std::string_view BytesOf(std::span<const uint64_t> v) {
  return {reinterpret_cast<const char*>(v.data()), v.size_bytes()};
}
std::string_view BytesOf(std::span<const float> v) {
  return {reinterpret_cast<const char*>(v.data()), v.size_bytes()};
}

// Copies little-endian uint64 ids out of `bytes` (a whole number of them).
void AppendIds(const WireBytes& bytes, std::vector<uint64_t>* ids) {
  ids->reserve(ids->size() + bytes.size() / sizeof(uint64_t));
  ForEachRun<uint64_t>(bytes, [ids](size_t, std::span<const uint64_t> run) {
    ids->insert(ids->end(), run.begin(), run.end());
  });
}

// A set of ids for a request's duplicate check: open addressing (linear
// probing, at most half full) in a buffer each thread reuses, so a check
// allocates nothing once its thread's buffer has grown; the request
// threads' hot path (absl's sets free a large array on clear()).
class IdSet {
 public:
  // Empties the set, with room for `n` ids.
  void Reset(size_t n) {
    size_t capacity = 16;
    int bits = 4;
    while (capacity < 2 * n) {
      capacity <<= 1;
      ++bits;
    }
    shift_ = 64 - bits;
    // A thread keeps its buffer, but not one far larger than it needs now
    // (after a request of many ids).
    if (slots_.capacity() > 8 * capacity) slots_ = std::vector<uint64_t>();
    slots_.assign(capacity, kEmpty);
    has_empty_ = false;
  }
  // Adds `id`; false when it was there.
  bool Insert(uint64_t id) {
    if (id == kEmpty) return !std::exchange(has_empty_, true);
    const size_t mask = slots_.size() - 1;
    // Fibonacci hashing: the product's high bits.
    for (size_t i = (id * 0x9e3779b97f4a7c15ULL) >> shift_;;
         i = (i + 1) & mask) {
      if (slots_[i] == id) return false;
      if (slots_[i] == kEmpty) {
        slots_[i] = id;
        return true;
      }
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // Marks a free slot.
  std::vector<uint64_t> slots_;
  int shift_ = 60;
  bool has_empty_ = false;  // kEmpty itself is in the set.
};

IdSet& ThreadIdSet() {
  thread_local IdSet set;
  return set;
}

// Copies `bytes` (a whole number of T) into `out`.
template <typename T>
bool CopyAligned(const std::string& bytes, std::vector<T>* out) {
  if (bytes.size() % sizeof(T) != 0) return false;
  out->resize(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return true;
}

}  // namespace

namespace {

// Buckets of each table the shard map places on this server. Errors:
// INVALID_ARGUMENT for a bucket key naming an unknown table or bucket.
absl::StatusOr<std::vector<std::vector<bool>>> HeldBuckets(
    const v1::Assignment& assignment) {
  const auto& specs = assignment.spec().model().sparse_tables();
  std::vector<std::vector<bool>> held(static_cast<size_t>(specs.size()));
  for (int t = 0; t < specs.size(); ++t) {
    const int32_t buckets = specs[t].num_buckets();  // Checked by the table.
    held[static_cast<size_t>(t)].assign(
        buckets >= 1 && buckets <= kMaxBucketsPerTable
            ? static_cast<size_t>(buckets)
            : 0,
        false);
  }
  for (const v1::BlockPlacement& p : assignment.shard_map().blocks()) {
    if (!IsBucketKey(p.key())) continue;
    const uint32_t t = BucketTable(p.key());
    const uint32_t b = BucketIndex(p.key());
    if (t >= held.size() || b >= held[t].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_map: bucket key ", p.key(), " names table ", t,
                       " bucket ", b, ", which the spec does not have"));
    }
    if (p.server() == assignment.index()) held[t][b] = true;
  }
  return held;
}

// Each table's share of `budget`: max-min fair over the memory each needs
// for its expected rows on this server (common/sparse_memory.h).
std::vector<int64_t> Shares(const v1::JobSpec& spec,
                            const std::vector<std::vector<bool>>& held,
                            int64_t budget) {
  std::vector<double> weights;
  const auto& specs = spec.model().sparse_tables();
  for (int t = 0; t < specs.size(); ++t) {
    const auto& h = held[static_cast<size_t>(t)];
    const double here =
        static_cast<double>(std::count(h.begin(), h.end(), true));
    const double expected = static_cast<double>(specs[t].expected_rows() > 0
                                                    ? specs[t].expected_rows()
                                                    : kDefaultExpectedRows);
    const int64_t slot =
        SparseSlotBytes(specs[t].dim(), SparseStateFloatsPerRow(specs[t]));
    weights.push_back(
        h.empty() || here == 0
            ? 0
            : static_cast<double>(SparseNeedBytes(
                  static_cast<int64_t>(std::ceil(
                      expected * here / static_cast<double>(h.size()))),
                  slot)));
  }
  return SparseBudgetShares(budget, weights);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparseTableSet>> SparseTableSet::Create(
    const v1::Assignment& assignment, bool accumulate,
    const SparseSetMemory& memory) {
  const v1::JobSpec& spec = assignment.spec();
  std::unique_ptr<SparseTableSet> set(new SparseTableSet());
  set->tier_ = memory.tier;
  set->server_budget_ = memory.server_budget;
  const auto& specs = spec.model().sparse_tables();
  auto held = HeldBuckets(assignment);
  if (!held.ok()) return held.status();
  const std::vector<int64_t> shares =
      memory.tier != nullptr ? Shares(spec, *held, memory.budget_bytes)
                             : std::vector<int64_t>(specs.size(), 0);
  if (!specs.empty() &&
      std::max(memory.pages.max_ready_bytes, memory.pages.max_recycled_bytes) >=
          kHugePageBytes) {
    set->pages_ = std::make_unique<HugePagePool>(memory.pages);
  }
  for (int t = 0; t < specs.size(); ++t) {
    SparseTableMemory table_memory{.tier = memory.tier,
                                   .pages = set->pages_.get()};
    if (memory.tier != nullptr) {
      int64_t cap = shares[static_cast<size_t>(t)];
      if (memory.server_budget != nullptr) {
        cap = memory.server_budget->Reserve(cap);
        set->reserved_ += cap;
      }
      table_memory.cap_bytes = cap;
    }
    auto rows = SparseTable::Create(specs[t], static_cast<uint32_t>(t),
                                    spec.seed(), accumulate, table_memory);
    if (!rows.ok()) {
      return absl::Status(rows.status().code(),
                          absl::StrCat("model.sparse_tables[", t,
                                       "]: ", rows.status().message()));
    }
    Table table;
    table.held = std::move((*held)[static_cast<size_t>(t)]);
    table.rows = *std::move(rows);
    set->tables_.push_back(std::move(table));
  }
  return set;
}

SparseTableSet::~SparseTableSet() {
  if (server_budget_ != nullptr) server_budget_->Release(reserved_);
}

absl::Status SparseTableSet::CheckTables(std::span<const uint32_t> tables,
                                         int64_t total_ids) const {
  absl::flat_hash_set<uint32_t> seen;
  for (uint32_t t : tables) {
    if (t >= tables_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse: table ", t, " does not exist (the job has ",
                       tables_.size(), " sparse tables)"));
    }
    if (!seen.insert(t).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse: table ", t, " appears more than once"));
    }
  }
  if (total_ids > kMaxSparseKeysPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse: ", total_ids, " ids in one request; at most ",
                     kMaxSparseKeysPerRequest));
  }
  return absl::OkStatus();
}

absl::Status SparseTableSet::CheckIds(uint32_t table, const WireBytes& keys,
                                      std::vector<uint64_t>* ids) const {
  if (keys.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse: table ", table, ": keys hold ", keys.size(),
                     " bytes, not a whole number of 8-byte ids"));
  }
  AppendIds(keys, ids);
  const Table& t = tables_[table];
  IdSet& seen = ThreadIdSet();
  seen.Reset(ids->size());
  for (uint64_t id : *ids) {
    if (!seen.Insert(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse: table ", table, ": id ", id, " appears more than once"));
    }
    const uint32_t bucket = BucketOfId(id, table, t.rows->num_buckets());
    if (!t.held[bucket]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse: table ", table, ": id ", id, " is in bucket ",
                       bucket, ", which this server does not hold"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SparseKeys>> SparseTableSet::CheckPull(
    const google::protobuf::RepeatedPtrField<v1::SparseRows>& sparse) const {
  std::vector<uint32_t> tables;
  int64_t total = 0;
  for (const v1::SparseRows& r : sparse) {
    tables.push_back(r.table());
    total += static_cast<int64_t>(r.keys().size() / sizeof(uint64_t));
  }
  if (auto s = CheckTables(tables, total); !s.ok()) return s;
  std::vector<SparseKeys> out;
  out.reserve(sparse.size());
  for (const v1::SparseRows& r : sparse) {
    SparseKeys& keys = out.emplace_back();
    keys.table = r.table();
    if (auto s = CheckIds(r.table(), WireBytes(r.keys()), &keys.ids); !s.ok()) {
      return s;
    }
  }
  return out;
}

SparsePushCheck SparseTableSet::CheckPush(
    std::span<const WireSparseRows> sparse, v1::Precision encoding) const {
  SparsePushCheck check;
  std::vector<uint32_t> tables;
  int64_t total = 0;
  for (const WireSparseRows& r : sparse) {
    tables.push_back(r.table);
    total += static_cast<int64_t>(r.keys.size() / sizeof(uint64_t));
  }
  check.invalid = CheckTables(tables, total);
  const size_t value_bytes = WireValueBytes(encoding);
  for (size_t i = 0; check.invalid.ok() && i < sparse.size(); ++i) {
    const WireSparseRows& r = sparse[i];
    TableUpdate::SparseRows& rows = check.rows.emplace_back();
    rows.table = r.table;
    check.invalid = CheckIds(r.table, r.keys, &rows.keys);
    if (!check.invalid.ok()) break;
    const size_t dim = static_cast<size_t>(tables_[r.table].rows->dim());
    const size_t want = rows.keys.size() * dim * value_bytes;
    if (r.values.size() != want) {
      check.invalid = absl::InvalidArgumentError(absl::StrCat(
          "sparse: table ", r.table, ": values hold ", r.values.size(),
          " bytes; ", rows.keys.size(), " rows of dim ", dim, " take ", want));
      break;
    }
    rows.values.resize(rows.keys.size() * dim);
    ForEachGradientRun(
        r.values, encoding, [&rows](size_t first, std::span<const float> run) {
          std::memcpy(rows.values.data() + first, run.data(), run.size_bytes());
        });
    if (check.finite && !AllFinite(std::span<const float>(rows.values))) {
      check.finite = false;
      check.non_finite_table = r.table;
    }
  }
  if (!check.invalid.ok()) check.rows.clear();
  return check;
}

std::vector<std::vector<float>> SparseTableSet::Read(
    std::span<const SparseKeys> keys, SparseColdReads* cold) const {
  std::vector<std::vector<float>> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const SparseTable& t = *tables_[keys[i].table].rows;
    out[i].resize(keys[i].ids.size() * static_cast<size_t>(t.dim()));
    if (cold != nullptr && i < cold->tables.size()) {
      t.Read(keys[i].ids, out[i].data(), &cold->tables[i]);
    } else {
      t.Read(keys[i].ids, out[i].data());
    }
  }
  if (cold != nullptr) *cold = {};
  return out;
}

void SparseTableSet::Accumulate(
    const std::vector<TableUpdate::SparseRows>& rows) {
  for (const TableUpdate::SparseRows& r : rows) {
    tables_[r.table].rows->Accumulate(r.keys, r.values);
  }
}

std::vector<TableUpdate::SparseRows> SparseTableSet::AveragedRows(
    int num_workers) {
  std::vector<TableUpdate::SparseRows> out;
  for (size_t t = 0; t < tables_.size(); ++t) {
    TableUpdate::SparseRows rows{.table = static_cast<uint32_t>(t)};
    tables_[t].rows->AveragedRowsInto(num_workers, &rows.keys, &rows.values);
    if (!rows.keys.empty()) out.push_back(std::move(rows));
  }
  return out;
}

void SparseTableSet::ClearAccumulated() {
  for (Table& t : tables_) t.rows->ClearAccumulated();
}

void SparseTableSet::Apply(const std::vector<TableUpdate::SparseRows>& rows,
                           int64_t clock, float lr_factor) {
  for (const TableUpdate::SparseRows& r : rows) {
    tables_[r.table].rows->Apply(r.keys, r.values, clock, lr_factor);
  }
}

absl::StatusOr<std::vector<TableUpdate::SparseRows>>
SparseTableSet::RowsOfRecord(const storage::v1::UpdateRecord& record) const {
  std::vector<TableUpdate::SparseRows> out;
  for (const auto& logged : record.sparse()) {
    if (logged.table() >= tables_.size()) {
      return absl::DataLossError(absl::StrCat(
          "names sparse table ", logged.table(), ", which the job lacks"));
    }
    TableUpdate::SparseRows& rows = out.emplace_back();
    rows.table = logged.table();
    const size_t dim = static_cast<size_t>(tables_[rows.table].rows->dim());
    if (!CopyAligned(logged.keys(), &rows.keys) ||
        !CopyAligned(logged.values(), &rows.values) ||
        rows.values.size() != rows.keys.size() * dim) {
      return absl::DataLossError(absl::StrCat("has sparse rows of table ",
                                              rows.table, " of a wrong size"));
    }
  }
  return out;
}

void SparseTableSet::LogRows(const std::vector<TableUpdate::SparseRows>& rows,
                             storage::v1::UpdateRecord* record) {
  for (const TableUpdate::SparseRows& r : rows) {
    auto* logged = record->add_sparse();
    logged->set_table(r.table);
    const std::string_view keys = BytesOf(std::span<const uint64_t>(r.keys));
    const std::string_view values = BytesOf(std::span<const float>(r.values));
    logged->set_keys(keys.data(), keys.size());
    logged->set_values(values.data(), values.size());
  }
}

std::vector<StoredBlock> SparseTableSet::Snapshot() const {
  std::vector<StoredBlock> out;
  size_t next = 0;
  SnapshotInto(&out, &next);
  out.resize(next);
  return out;
}

void SparseTableSet::SnapshotInto(std::vector<StoredBlock>* blocks,
                                  size_t* next) const {
  for (const Table& t : tables_) t.rows->SnapshotInto(blocks, next);
}

namespace {

// The tables' cuts and the tier's view of the same moment.
class TieredSnapshot final : public DeferredBlocks {
 public:
  TieredSnapshot(std::unique_ptr<SparseTier::View> view,
                 std::vector<SparseTableCut> cuts)
      : view_(std::move(view)), cuts_(std::move(cuts)) {}
  int64_t rows_bytes() const override {
    int64_t bytes = 0;
    for (const SparseTableCut& cut : cuts_) bytes += cut.rows_bytes();
    return bytes;
  }
  std::unique_ptr<BucketRowsSource> Stream() const override {
    return std::make_unique<SparseSnapshotStream>(*view_, cuts_);
  }

 private:
  const std::unique_ptr<SparseTier::View> view_;
  const std::vector<SparseTableCut> cuts_;
};

}  // namespace

std::unique_ptr<const DeferredBlocks> SparseTableSet::CutTiered() const {
  PS_CHECK(tier_ != nullptr);
  std::vector<SparseTableCut> cuts;
  cuts.reserve(tables_.size());
  for (const Table& t : tables_) cuts.push_back(t.rows->Cut());
  return std::make_unique<TieredSnapshot>(tier_->ViewNow(), std::move(cuts));
}

absl::Status SparseTableSet::Restore(const StoredBlock& bucket) {
  const uint32_t t = BucketTable(bucket.key);
  const uint32_t b = BucketIndex(bucket.key);
  if (t >= tables_.size() || b >= tables_[t].held.size() ||
      !tables_[t].held[b]) {
    return absl::DataLossError(absl::StrCat("stored bucket ", b,
                                            " of sparse table ", t,
                                            " is not one this server holds"));
  }
  return tables_[t].rows->Restore(bucket);
}

SparseTierCounts SparseTableSet::TierCounts(size_t table) const {
  return tables_[table].rows->tier_counts();
}

int64_t SparseTableSet::TierDiskBytes(size_t table) const {
  return tier_ == nullptr
             ? 0
             : tier_->ApproximateBytes(static_cast<uint32_t>(table));
}

absl::Status SparseTableSet::TierStatus() const {
  for (const Table& t : tables_) {
    if (!t.rows->tier_status().ok()) return t.rows->tier_status();
  }
  return absl::OkStatus();
}

SparseTableCounts SparseTableSet::Counts(size_t table) const {
  const SparseTable& t = *tables_[table].rows;
  return {.rows = t.num_rows(),
          .admissions = t.admissions(),
          .rejections = t.rejections(),
          .evictions = t.evictions()};
}

}  // namespace ps

#include "server/sparse_tier.h"

#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rocksdb_status.h"

namespace ps {
namespace {

constexpr size_t kKeyBytes = 12;
constexpr size_t kMetaBytes = 16;

void PutBigEndian(uint64_t v, int bytes, char* out) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

uint64_t GetBigEndian(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v = (v << 8) | static_cast<unsigned char>(in[i]);
  }
  return v;
}

std::string Key(uint32_t table, uint64_t id) {
  std::string key(kKeyBytes, '\0');
  PutBigEndian(table, 4, key.data());
  PutBigEndian(id, 8, key.data() + 4);
  return key;
}

rocksdb::Options TierOptions(const SparseTierOptions& options) {
  rocksdb::Options db;
  db.create_if_missing = true;
  db.error_if_exists = true;
  db.write_buffer_size = options.write_buffer_bytes;
  db.max_write_buffer_number = 2;
  db.max_background_jobs = 2;
  // Every row is written once per demotion: compact L0 into L1 in fewer,
  // larger steps (each rewrites L1), and let L0 grow before slowing writes.
  db.level0_file_num_compaction_trigger = 8;
  db.level0_slowdown_writes_trigger = 40;
  db.level0_stop_writes_trigger = 60;
  // Floats do not compress.
  db.compression = rocksdb::kNoCompression;
  db.bottommost_compression = rocksdb::kNoCompression;
  // Most lookups are of new ids, absent: a Bloom filter over the memtable's
  // keys answers them without searching its skip list.
  db.memtable_whole_key_filtering = true;
  db.memtable_prefix_bloom_size_ratio = 0.05;
  // A batch's keys come sorted (Write) and share their table's 4-byte
  // prefix: the skip list continues each insert from the previous one.
  db.memtable_insert_with_hint_prefix_extractor.reset(
      rocksdb::NewFixedPrefixTransform(4));
  db.max_log_file_size = size_t{1} << 20;
  db.keep_log_file_num = 2;
  rocksdb::BlockBasedTableOptions table;
  // Index and filter blocks live in the bounded cache, not beside it, in
  // its high-priority half: every lookup needs them, a data block only its
  // row's.
  // One shard: a shard smaller than a table file's filter block (about
  // 1.25 bytes a row) would never keep it, and every lookup would read and
  // checksum it again. The cache is used under the job's lock anyway.
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes,
                                           /*num_shard_bits=*/0,
                                           /*strict_capacity_limit=*/false,
                                           /*high_pri_pool_ratio=*/0.5);
  table.cache_index_and_filter_blocks = true;
  table.cache_index_and_filter_blocks_with_high_priority = true;
  // A lookup reads one block for one row of about 100 bytes: small blocks
  // copy less (the index, in the cache, grows to about 2 % of the data).
  table.block_size = 1024;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  // New ids are looked up and absent: a Bloom filter answers most of those
  // without reading a block.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  db.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return db;
}

}  // namespace

int64_t SparseMemoryBudget::Reserve(int64_t bytes) {
  int64_t now = reserved_.load();
  while (true) {
    const int64_t grant = std::max<int64_t>(0, std::min(bytes, limit_ - now));
    if (reserved_.compare_exchange_weak(now, now + grant)) return grant;
  }
}

void SparseMemoryBudget::Release(int64_t bytes) { reserved_ -= bytes; }

absl::StatusOr<std::unique_ptr<SparseTier>> SparseTier::Open(
    const SparseTierOptions& options) {
  namespace fs = std::filesystem;
  if (options.path.empty()) {
    return absl::InvalidArgumentError("sparse tier: empty path");
  }
  std::error_code error;
  fs::remove_all(options.path, error);
  if (!error) fs::create_directories(options.path, error);
  if (error) {
    return absl::InternalError(absl::StrCat(
        "sparse tier: cannot make ", options.path, ": ", error.message()));
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(TierOptions(options), options.path, &raw);
  if (!s.ok()) {
    return RocksDbStatusToAbsl(
        s, absl::StrCat("sparse tier: opening ", options.path));
  }
  return std::unique_ptr<SparseTier>(
      new SparseTier(options.path, std::unique_ptr<rocksdb::DB>(raw)));
}

SparseTier::SparseTier(std::string path, std::unique_ptr<rocksdb::DB> db)
    : path_(std::move(path)), db_(std::move(db)) {}

SparseTier::~SparseTier() {
  if (rocksdb::Status s = db_->Close(); !s.ok()) {
    PS_LOG_ERROR("sparse tier ", path_, ": close: ", s.ToString());
  }
  db_.reset();
  std::error_code error;
  std::filesystem::remove_all(path_, error);
  if (error) {
    PS_LOG_ERROR("sparse tier: cannot remove ", path_, ": ", error.message());
  }
}

absl::Status SparseTier::MultiGet(uint32_t table, std::span<const uint64_t> ids,
                                  std::vector<std::string>* values) const {
  values->assign(ids.size(), std::string());
  if (ids.empty()) return absl::OkStatus();
  keys_looked_up_ += static_cast<int64_t>(ids.size());
  std::vector<std::string> keys(ids.size());
  std::vector<rocksdb::Slice> slices(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    keys[i] = Key(table, ids[i]);
    slices[i] = keys[i];
  }
  std::vector<rocksdb::PinnableSlice> found(ids.size());
  std::vector<rocksdb::Status> statuses(ids.size());
  rocksdb::ReadOptions options;
  // A cache of this process's own writes: the blocks are not checksummed
  // again on every read (a snapshot's scan, ForEach, still checks them).
  options.verify_checksums = false;
  db_->MultiGet(options, db_->DefaultColumnFamily(), ids.size(), slices.data(),
                found.data(), statuses.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (statuses[i].ok()) {
      (*values)[i].assign(found[i].data(), found[i].size());
    } else if (!statuses[i].IsNotFound()) {
      return RocksDbStatusToAbsl(statuses[i], "sparse tier: read");
    }
  }
  return absl::OkStatus();
}

void SparseTier::Encode(int64_t clock, int64_t updates, const float* floats,
                        size_t num_floats, std::string* out) {
  out->resize(kMetaBytes + num_floats * sizeof(float));
  std::memcpy(out->data(), &clock, 8);
  std::memcpy(out->data() + 8, &updates, 8);
  if (num_floats > 0) {
    std::memcpy(out->data() + kMetaBytes, floats, num_floats * sizeof(float));
  }
}

bool SparseTier::Decode(std::string_view value, size_t num_floats,
                        int64_t* clock, int64_t* updates, float* floats) {
  if (value.size() != kMetaBytes + num_floats * sizeof(float)) return false;
  std::memcpy(clock, value.data(), 8);
  std::memcpy(updates, value.data() + 8, 8);
  if (floats != nullptr && num_floats > 0) {
    std::memcpy(floats, value.data() + kMetaBytes, num_floats * sizeof(float));
  }
  return true;
}

void SparseTier::Batch::Put(uint32_t table, uint64_t id, int64_t clock,
                            int64_t updates, const float* floats,
                            size_t num_floats) {
  Op& op = ops_.emplace_back();
  op.key = Key(table, id);
  op.put = true;
  Encode(clock, updates, floats, num_floats, &op.value);
}

void SparseTier::Batch::Delete(uint32_t table, uint64_t id) {
  ops_.push_back({.key = Key(table, id), .value = {}, .put = false});
}

absl::Status SparseTier::Write(Batch& batch) {
  if (batch.empty()) return absl::OkStatus();
  std::stable_sort(
      batch.ops_.begin(), batch.ops_.end(),
      [](const Batch::Op& a, const Batch::Op& b) { return a.key < b.key; });
  rocksdb::WriteBatch write;
  for (const Batch::Op& op : batch.ops_) {
    rocksdb::Status s =
        op.put ? write.Put(op.key, op.value) : write.Delete(op.key);
    if (!s.ok()) {
      batch.ops_.clear();
      return RocksDbStatusToAbsl(s, "sparse tier: batch");
    }
  }
  batch.ops_.clear();
  rocksdb::WriteOptions options;
  options.disableWAL = true;  // A cache: the shard store is the durable copy.
  rocksdb::Status s = db_->Write(options, &write);
  return s.ok() ? absl::OkStatus()
                : RocksDbStatusToAbsl(s, "sparse tier: write");
}

absl::Status SparseTier::ForEach(
    uint32_t table,
    const std::function<void(uint64_t id, std::string_view value)>& visit)
    const {
  std::string begin(4, '\0');
  PutBigEndian(table, 4, begin.data());
  std::string end(4, '\0');
  PutBigEndian(uint64_t{table} + 1, 4, end.data());
  rocksdb::ReadOptions options;
  options.fill_cache = false;  // One pass over everything: keep the cache.
  const rocksdb::Slice upper(end);
  if (table != ~uint32_t{0}) options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options));
  for (it->Seek(begin); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key.size() != kKeyBytes || GetBigEndian(key.data(), 4) != table) break;
    visit(GetBigEndian(key.data() + 4, 8),
          std::string_view(it->value().data(), it->value().size()));
  }
  return it->status().ok()
             ? absl::OkStatus()
             : RocksDbStatusToAbsl(it->status(), "sparse tier: scan");
}

int64_t SparseTier::ApproximateBytes(uint32_t table) const {
  std::string begin(4, '\0');
  PutBigEndian(table, 4, begin.data());
  std::string end(4, '\0');
  PutBigEndian(uint64_t{table} + 1, 4, end.data());
  if (table == ~uint32_t{0}) end.assign(kKeyBytes + 1, '\xff');
  rocksdb::Range range(begin, end);
  uint64_t size = 0;
  rocksdb::SizeApproximationOptions options;
  options.include_memtables = true;
  options.include_files = true;
  if (!db_->GetApproximateSizes(options, db_->DefaultColumnFamily(), &range, 1,
                                &size)
           .ok()) {
    return 0;
  }
  return static_cast<int64_t>(size);
}

}  // namespace ps

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
#include "common/status_macros.h"

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
  return std::unique_ptr<SparseTier>(new SparseTier(
      options.path, std::unique_ptr<rocksdb::DB>(raw), options.queue_bytes));
}

SparseTier::SparseTier(std::string path, std::unique_ptr<rocksdb::DB> db,
                       size_t queue_bytes)
    : path_(std::move(path)), db_(std::move(db)), queue_limit_(queue_bytes) {
  writer_ = std::thread([this] { WriterLoop(); });
}

SparseTier::~SparseTier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  writer_.join();
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
  // The queue first, newest batch first: a row found there is the newest.
  // A row not found there is in RocksDB if anywhere: the writer takes a
  // batch off the queue only after RocksDB holds it.
  std::vector<size_t> rest;
  {
    absl::MutexLock lock(&mu_);
    if (!writer_status_.ok()) return writer_status_;
    if (queue_.empty()) {
      rest.resize(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) rest[i] = i;
    } else {
      for (size_t i = 0; i < ids.size(); ++i) {
        const Batch::Op* op = nullptr;
        const Batch* in = nullptr;
        for (auto b = queue_.rbegin(); op == nullptr && b != queue_.rend();
             ++b) {
          op = b->Find(table, ids[i]);
          in = &*b;
        }
        if (op == nullptr) {
          rest.push_back(i);
        } else if (op->size != Batch::kDelete) {
          (*values)[i].assign(in->values_.data() + op->offset, op->size);
        }
      }
    }
  }
  if (rest.empty()) return absl::OkStatus();
  std::vector<std::string> keys(rest.size());
  std::vector<rocksdb::Slice> slices(rest.size());
  for (size_t j = 0; j < rest.size(); ++j) {
    keys[j] = Key(table, ids[rest[j]]);
    slices[j] = keys[j];
  }
  std::vector<rocksdb::PinnableSlice> found(rest.size());
  std::vector<rocksdb::Status> statuses(rest.size());
  rocksdb::ReadOptions options;
  // A cache of this process's own writes: the blocks are not checksummed
  // again on every read (a snapshot's scan, ForEach, still checks them).
  options.verify_checksums = false;
  db_->MultiGet(options, db_->DefaultColumnFamily(), rest.size(), slices.data(),
                found.data(), statuses.data());
  for (size_t j = 0; j < rest.size(); ++j) {
    if (statuses[j].ok()) {
      (*values)[rest[j]].assign(found[j].data(), found[j].size());
    } else if (!statuses[j].IsNotFound()) {
      return RocksDbStatusToAbsl(statuses[j], "sparse tier: read");
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
  const size_t size = kMetaBytes + num_floats * sizeof(float);
  const size_t offset = values_.size();
  values_.resize(offset + size);
  char* out = values_.data() + offset;
  std::memcpy(out, &clock, 8);
  std::memcpy(out + 8, &updates, 8);
  if (num_floats > 0) {
    std::memcpy(out + kMetaBytes, floats, num_floats * sizeof(float));
  }
  ops_.push_back({.table = table,
                  .size = static_cast<uint32_t>(size),
                  .id = id,
                  .offset = offset});
}

void SparseTier::Batch::Delete(uint32_t table, uint64_t id) {
  ops_.push_back({.table = table, .size = kDelete, .id = id, .offset = 0});
}

size_t SparseTier::Batch::bytes() const {
  return ops_.capacity() * sizeof(Op) + values_.capacity() + sizeof(Batch);
}

void SparseTier::Batch::Sort() {
  std::stable_sort(ops_.begin(), ops_.end(), [](const Op& a, const Op& b) {
    return a.table != b.table ? a.table < b.table : a.id < b.id;
  });
}

const SparseTier::Batch::Op* SparseTier::Batch::Find(uint32_t table,
                                                     uint64_t id) const {
  // A table's batch holds its rows only: most lookups stop here.
  if (ops_.empty() || table < ops_.front().table || table > ops_.back().table) {
    return nullptr;
  }
  // The last op of the key: the first op past it, minus one.
  auto it = std::upper_bound(
      ops_.begin(), ops_.end(), std::make_pair(table, id),
      [](const std::pair<uint32_t, uint64_t>& key, const Op& op) {
        return key.first != op.table ? key.first < op.table
                                     : key.second < op.id;
      });
  if (it == ops_.begin()) return nullptr;
  --it;
  return it->table == table && it->id == id ? &*it : nullptr;
}

absl::Status SparseTier::Apply(const Batch& batch) const {
  rocksdb::WriteBatch write(batch.values_.size() +
                            batch.ops_.size() * (kKeyBytes + 16) + 64);
  char key[kKeyBytes];
  for (const Batch::Op& op : batch.ops_) {
    PutBigEndian(op.table, 4, key);
    PutBigEndian(op.id, 8, key + 4);
    const rocksdb::Slice k(key, kKeyBytes);
    rocksdb::Status s =
        op.size == Batch::kDelete
            ? write.Delete(k)
            : write.Put(
                  k, rocksdb::Slice(batch.values_.data() + op.offset, op.size));
    if (!s.ok()) return RocksDbStatusToAbsl(s, "sparse tier: batch");
  }
  rocksdb::WriteOptions options;
  options.disableWAL = true;  // A cache: the shard store is the durable copy.
  rocksdb::Status s = db_->Write(options, &write);
  return s.ok() ? absl::OkStatus()
                : RocksDbStatusToAbsl(s, "sparse tier: write");
}

absl::Status SparseTier::Write(Batch& batch) {
  if (batch.empty()) return absl::OkStatus();
  batch.Sort();
  Batch queued;
  std::swap(queued, batch);
  const size_t bytes = queued.bytes();
  absl::MutexLock lock(&mu_);
  if (bytes > queue_limit_) {
    // Too large to queue: after the queue, at once.
    while (!queue_.empty() && writer_status_.ok()) changed_.Wait(&mu_);
    if (!writer_status_.ok()) return writer_status_;
    absl::Status s = Apply(queued);
    if (!s.ok()) writer_status_ = s;
    return s;
  }
  while (queue_bytes_ + bytes > queue_limit_ && writer_status_.ok()) {
    changed_.Wait(&mu_);
  }
  if (!writer_status_.ok()) return writer_status_;
  queue_bytes_ += bytes;
  queue_.push_back(std::move(queued));
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status SparseTier::Drain() const {
  absl::MutexLock lock(&mu_);
  while (!queue_.empty() && writer_status_.ok()) changed_.Wait(&mu_);
  return writer_status_;
}

size_t SparseTier::queued_bytes() const {
  absl::MutexLock lock(&mu_);
  return queue_bytes_;
}

void SparseTier::PauseWriterForTest(bool paused) {
  absl::MutexLock lock(&mu_);
  paused_ = paused;
  changed_.SignalAll();
}

void SparseTier::WriterLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while ((queue_.empty() || paused_) && !stop_) changed_.Wait(&mu_);
    if (queue_.empty()) return;  // Stopped, everything written.
    // The front batch stays queued (readable) while it is written; only
    // Write appends, so the reference stays valid without the lock.
    const Batch& front = queue_.front();
    absl::Status s = writer_status_;
    if (s.ok()) {
      mu_.Unlock();
      s = Apply(front);
      mu_.Lock();
    }
    if (!s.ok() && writer_status_.ok()) {
      writer_status_ = s;
      PS_LOG_ERROR(path_, ": ", s.message());
    }
    queue_bytes_ -= front.bytes();
    queue_.pop_front();
    changed_.SignalAll();
  }
}

absl::Status SparseTier::ForEach(
    uint32_t table,
    const std::function<void(uint64_t id, std::string_view value)>& visit)
    const {
  PS_RETURN_IF_ERROR(Drain());
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

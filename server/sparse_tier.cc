#include "server/sparse_tier.h"

#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rocksdb_status.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"

namespace ps {
namespace {

constexpr size_t kKeyBytes = 16;  // Table, bucket, id.
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

void PutKey(uint32_t table, uint32_t bucket, uint64_t id, char* out) {
  PutBigEndian(table, 4, out);
  PutBigEndian(bucket, 4, out + 4);
  PutBigEndian(id, 8, out + 8);
}

std::string Key(uint32_t table, uint32_t bucket, uint64_t id) {
  std::string key(kKeyBytes, '\0');
  PutKey(table, bucket, id, key.data());
  return key;
}

rocksdb::Options TierOptions(const SparseTierOptions& options) {
  rocksdb::Options db;
  db.create_if_missing = true;
  db.error_if_exists = true;
  db.write_buffer_size = options.write_buffer_bytes;
  db.max_write_buffer_number = 2;
  db.max_background_jobs = 2;
  // Every row is written once per demotion, in ingested files of the
  // queue's half (16 MiB): compact L0 into L1 in fewer, larger steps (each
  // rewrites L1), and let L0 grow before slowing writes.
  db.level0_file_num_compaction_trigger = 8;
  db.level0_slowdown_writes_trigger = 40;
  db.level0_stop_writes_trigger = 60;
  // Floats do not compress.
  db.compression = rocksdb::kNoCompression;
  db.bottommost_compression = rocksdb::kNoCompression;
  // The memtable stays empty: the writer ingests table files (Ingest).
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
  fs::create_directories(fs::path(options.path) / "ingest", error);
  if (error) {
    delete raw;
    return absl::InternalError(absl::StrCat("sparse tier: cannot make ",
                                            options.path,
                                            "/ingest: ", error.message()));
  }
  return std::unique_ptr<SparseTier>(
      new SparseTier(options.path, TierOptions(options),
                     std::unique_ptr<rocksdb::DB>(raw), options.queue_bytes));
}

SparseTier::SparseTier(std::string path, rocksdb::Options options,
                       std::unique_ptr<rocksdb::DB> db, size_t queue_bytes)
    : path_(std::move(path)),
      options_(std::move(options)),
      db_(std::move(db)),
      queue_limit_(queue_bytes) {
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

void SparseTier::SetBuckets(uint32_t table, uint32_t num_buckets) {
  absl::MutexLock lock(&buckets_mu_);
  buckets_[table] = num_buckets;
}

uint32_t SparseTier::BucketsOf(uint32_t table) const {
  absl::MutexLock lock(&buckets_mu_);
  const auto it = buckets_.find(table);
  return it == buckets_.end() ? 1 : it->second;
}

absl::Status SparseTier::MultiGet(uint32_t table, std::span<const uint64_t> ids,
                                  std::vector<std::string>* values) const {
  values->assign(ids.size(), std::string());
  if (ids.empty()) return absl::OkStatus();
  keys_looked_up_ += static_cast<int64_t>(ids.size());
  const uint32_t num_buckets = BucketsOf(table);
  // The queue first: a row found there is the newest. A row not found
  // there is in RocksDB if anywhere: the writer forgets a batch's rows only
  // after RocksDB holds them.
  std::vector<size_t> rest;
  {
    absl::MutexLock lock(&mu_);
    if (!writer_status_.ok()) return writer_status_;
    rest.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto it = queued_rows_.find(RowKey{table, ids[i]});
      if (it == queued_rows_.end()) {
        rest.push_back(i);
        continue;
      }
      const Batch& in = *it->second;
      const Batch::Op* op =
          in.Find(table, BucketOfId(ids[i], table, num_buckets), ids[i]);
      if (op->size != Batch::kDelete) {
        (*values)[i].assign(in.values_.data() + op->offset, op->size);
      }
    }
  }
  if (rest.empty()) return absl::OkStatus();
  std::vector<std::string> keys(rest.size());
  std::vector<rocksdb::Slice> slices(rest.size());
  for (size_t j = 0; j < rest.size(); ++j) {
    const uint64_t id = ids[rest[j]];
    keys[j] = Key(table, BucketOfId(id, table, num_buckets), id);
    slices[j] = keys[j];
  }
  std::vector<rocksdb::PinnableSlice> found(rest.size());
  std::vector<rocksdb::Status> statuses(rest.size());
  rocksdb::ReadOptions options;
  // A cache of this process's own writes: the blocks are not checksummed
  // again on every read (scans, ForEach and View::ForEach, still check them).
  options.verify_checksums = false;
  // A data block holds about ten rows of ids spread over the whole range:
  // the next read of it is rarely soon. Not cached, it is not inserted (and
  // an older one evicted) on every read; the index and filter blocks are
  // cached when a table file opens, and stay (nothing else fills the cache).
  options.fill_cache = false;
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
  // An index entry a row: key, batch pointer and control byte, at the
  // table's 7/8 load.
  constexpr size_t kIndexBytesPerOp = 32;
  return ops_.capacity() * (sizeof(Op) + kIndexBytesPerOp) +
         values_.capacity() + sizeof(Batch);
}

void SparseTier::Batch::Sort() {
  std::stable_sort(ops_.begin(), ops_.end(), [](const Op& a, const Op& b) {
    if (a.table != b.table) return a.table < b.table;
    return a.bucket != b.bucket ? a.bucket < b.bucket : a.id < b.id;
  });
}

const SparseTier::Batch::Op* SparseTier::Batch::Find(uint32_t table,
                                                     uint32_t bucket,
                                                     uint64_t id) const {
  // A table's batch holds its rows only: most lookups stop here.
  if (ops_.empty() || table < ops_.front().table || table > ops_.back().table) {
    return nullptr;
  }
  // The last op of the key: the first op past it, minus one.
  const Op key{.table = table, .id = id, .bucket = bucket};
  auto it = std::upper_bound(
      ops_.begin(), ops_.end(), key, [](const Op& k, const Op& op) {
        if (k.table != op.table) return k.table < op.table;
        return k.bucket != op.bucket ? k.bucket < op.bucket : k.id < op.id;
      });
  if (it == ops_.begin()) return nullptr;
  --it;
  return it->table == table && it->id == id ? &*it : nullptr;
}

rocksdb::Status SparseTier::WriteMerged(std::span<const Batch* const> batches,
                                        rocksdb::SstFileWriter& writer) {
  // A k-way merge of the sorted batches into one file in key order, the
  // newest change of each key only: of a key's ops the last of the newest
  // batch holding it. No copy of the rows, and memory for one cursor a
  // batch (the queue's bound is the tier's fixed overhead).
  struct Cursor {
    size_t batch;  // Index into `batches`: larger is newer.
    size_t at;     // The last op of the current key's run in the batch.
  };
  const auto op_of = [&](const Cursor& c) -> const Batch::Op& {
    return batches[c.batch]->ops_[c.at];
  };
  const auto settle = [&](Cursor& c) {  // To the last op of c.at's key.
    const std::vector<Batch::Op>& ops = batches[c.batch]->ops_;
    while (c.at + 1 < ops.size() && ops[c.at + 1].table == ops[c.at].table &&
           ops[c.at + 1].id == ops[c.at].id) {
      ++c.at;
    }
  };
  // The heap's top: the smallest key, of the newest batch among equals.
  const auto lower = [&](const Cursor& x, const Cursor& y) {
    const Batch::Op& a = op_of(x);
    const Batch::Op& b = op_of(y);
    if (a.table != b.table) return a.table > b.table;
    if (a.bucket != b.bucket) return a.bucket > b.bucket;
    if (a.id != b.id) return a.id > b.id;
    return x.batch < y.batch;
  };
  std::vector<Cursor> heap;
  heap.reserve(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    if (batches[i]->ops_.empty()) continue;
    Cursor c{.batch = i, .at = 0};
    settle(c);
    heap.push_back(c);
  }
  std::make_heap(heap.begin(), heap.end(), lower);
  // Moves the heap's top past its key (popped for good at its batch's end).
  const auto advance_top = [&] {
    std::pop_heap(heap.begin(), heap.end(), lower);
    Cursor& c = heap.back();
    if (++c.at < batches[c.batch]->ops_.size()) {
      settle(c);
      std::push_heap(heap.begin(), heap.end(), lower);
    } else {
      heap.pop_back();
    }
  };
  rocksdb::Status s;
  char key[kKeyBytes];
  while (s.ok() && !heap.empty()) {
    const Batch::Op& op = op_of(heap.front());
    const Batch& batch = *batches[heap.front().batch];
    const uint32_t table = op.table;
    const uint64_t id = op.id;
    PutKey(table, op.bucket, id, key);
    const rocksdb::Slice k(key, kKeyBytes);
    s = op.size == Batch::kDelete
            ? writer.Delete(k)
            : writer.Put(
                  k, rocksdb::Slice(batch.values_.data() + op.offset, op.size));
    // This key's older changes, in older batches, are not written.
    do {
      advance_top();
    } while (!heap.empty() && op_of(heap.front()).table == table &&
             op_of(heap.front()).id == id);
  }
  return s;
}

absl::Status SparseTier::Ingest(std::span<const Batch* const> batches) const {
  const std::string file =
      absl::StrCat(path_, "/ingest/", files_ingested_.load(), ".sst");
  // The page cache keeps what it wrote: pulls read the rows back soon.
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options_,
                                /*column_family=*/nullptr,
                                /*invalidate_page_cache=*/false);
  rocksdb::Status s = writer.Open(file);
  if (s.ok()) s = WriteMerged(batches, writer);
  if (s.ok()) s = writer.Finish();
  if (s.ok()) {
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;  // A hard link: the rows are not copied.
    s = db_->IngestExternalFile({file}, ingest);
  }
  std::error_code ignored;
  std::filesystem::remove(file, ignored);  // Linked (or failed): not needed.
  ++files_ingested_;
  return s.ok() ? absl::OkStatus()
                : RocksDbStatusToAbsl(s, "sparse tier: ingest");
}

absl::Status SparseTier::Write(Batch& batch) {
  if (batch.empty()) return absl::OkStatus();
  // Each row's bucket, for its key (a batch is mostly one table's).
  uint32_t table = batch.ops_.front().table;
  uint32_t num_buckets = BucketsOf(table);
  for (Batch::Op& op : batch.ops_) {
    if (op.table != table) {
      table = op.table;
      num_buckets = BucketsOf(table);
    }
    op.bucket = BucketOfId(op.id, op.table, num_buckets);
  }
  batch.Sort();
  Batch queued;
  std::swap(queued, batch);
  const size_t bytes = queued.bytes();
  absl::MutexLock lock(&mu_);
  // Too large to queue: after the queue, at once. Else: when there is room.
  const bool at_once = bytes > queue_limit_;
  const auto must_wait = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return writer_status_.ok() &&
           (at_once ? !queue_.empty() : queue_bytes_ + bytes > queue_limit_);
  };
  if (must_wait()) {
    ++waiters_;  // The writer writes what is queued without waiting for more.
    changed_.SignalAll();
    while (must_wait()) changed_.Wait(&mu_);
    --waiters_;
  }
  if (!writer_status_.ok()) return writer_status_;
  if (at_once) {
    const Batch* one[] = {&queued};
    absl::Status s = Ingest(one);
    if (!s.ok()) writer_status_ = s;
    return s;
  }
  queue_bytes_ += bytes;
  ++batches_queued_;
  queue_.push_back(std::move(queued));
  const Batch* in = &queue_.back();
  for (const Batch::Op& op : in->ops_) {
    queued_rows_.insert_or_assign(RowKey{op.table, op.id}, in);
  }
  if (WriterShouldWrite()) changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status SparseTier::Drain() const {
  absl::MutexLock lock(&mu_);
  ++waiters_;
  changed_.SignalAll();
  while (!queue_.empty() && writer_status_.ok()) changed_.Wait(&mu_);
  --waiters_;
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

bool SparseTier::WriterShouldWrite() const {
  if (queue_.empty()) return false;
  if (stop_) return true;  // Closing: even while paused.
  if (paused_) return false;
  return waiters_ > 0 || !cuts_.empty() || 2 * queue_bytes_ >= queue_limit_;
}

void SparseTier::WriterLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (!WriterShouldWrite() && !stop_) changed_.Wait(&mu_);
    if (queue_.empty()) return;  // Stopped, everything written.
    // The queued batches stay readable while they are written; Write only
    // appends, and a deque's elements do not move, so the pointers stay
    // valid without the lock.
    // Up to the oldest view's marker: its snapshot sees no later batch.
    size_t take = queue_.size();
    if (!cuts_.empty()) {
      take = std::min<size_t>(take, cuts_.front().first - batches_written_);
    }
    std::vector<const Batch*> batches;
    batches.reserve(take);
    for (size_t i = 0; i < take; ++i) batches.push_back(&queue_[i]);
    absl::Status s = writer_status_;
    if (s.ok()) {
      mu_.Unlock();
      s = Ingest(batches);
      mu_.Lock();
    }
    if (!s.ok() && writer_status_.ok()) {
      writer_status_ = s;
      PS_LOG_ERROR(path_, ": ", s.message());
    }
    for (size_t i = 0; i < batches.size(); ++i) {
      ForgetWritten(queue_.front());
      queue_bytes_ -= queue_.front().bytes();
      queue_.pop_front();
    }
    batches_written_ += batches.size();
    TakeViews();
    changed_.SignalAll();
  }
}

void SparseTier::ForgetWritten(const Batch& batch) {
  // Reads between the pieces find a forgotten row in RocksDB, and the rest
  // still in `batch`, which stays queued until every entry is gone.
  constexpr size_t kPiece = 4096;
  const std::vector<Batch::Op>& ops = batch.ops_;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i > 0 && i % kPiece == 0) {
      mu_.Unlock();
      mu_.Lock();
    }
    const auto it = queued_rows_.find(RowKey{ops[i].table, ops[i].id});
    // A newer batch's change of the row keeps its entry.
    if (it != queued_rows_.end() && it->second == &batch) {
      queued_rows_.erase(it);
    }
  }
}

absl::Status SparseTier::ForEach(
    uint32_t table,
    const std::function<void(uint64_t id, std::string_view value)>& visit)
    const {
  PS_RETURN_IF_ERROR(Drain());
  return Scan(nullptr, table, visit);
}

absl::Status SparseTier::Scan(
    const rocksdb::Snapshot* snapshot, uint32_t table,
    const std::function<void(uint64_t id, std::string_view value)>& visit)
    const {
  std::string begin(4, '\0');
  PutBigEndian(table, 4, begin.data());
  std::string end(4, '\0');
  PutBigEndian(uint64_t{table} + 1, 4, end.data());
  rocksdb::ReadOptions options;
  options.fill_cache = false;  // One pass over everything: keep the cache.
  options.snapshot = snapshot;
  const rocksdb::Slice upper(end);
  if (table != ~uint32_t{0}) options.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options));
  for (it->Seek(begin); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key.size() != kKeyBytes || GetBigEndian(key.data(), 4) != table) break;
    visit(GetBigEndian(key.data() + 8, 8),
          std::string_view(it->value().data(), it->value().size()));
  }
  return it->status().ok()
             ? absl::OkStatus()
             : RocksDbStatusToAbsl(it->status(), "sparse tier: scan");
}

// A view's state, guarded by its tier's mu_.
struct SparseTier::View::Cut {
  bool done = false;       // Taken (or failed): the writer is past it.
  bool abandoned = false;  // The View went first: nothing to take.
  const rocksdb::Snapshot* snapshot = nullptr;  // Once done, OK.
  absl::Status status;                          // Once done.
};

std::unique_ptr<SparseTier::View> SparseTier::ViewNow() const {
  auto cut = std::make_shared<View::Cut>();
  absl::MutexLock lock(&mu_);
  cuts_.emplace_back(batches_queued_, cut);
  TakeViews();  // At once when nothing is queued.
  if (!cut->done) changed_.SignalAll();
  return std::unique_ptr<View>(new View(this, std::move(cut)));
}

void SparseTier::TakeViews() const {
  while (!cuts_.empty() && cuts_.front().first <= batches_written_) {
    View::Cut& cut = *cuts_.front().second;
    cut.status = writer_status_;
    if (cut.status.ok() && !cut.abandoned) cut.snapshot = db_->GetSnapshot();
    cut.done = true;
    cuts_.pop_front();
  }
}

SparseTier::View::~View() {
  absl::MutexLock lock(&tier_->mu_);
  if (!cut_->done) {
    cut_->abandoned = true;
  } else if (cut_->snapshot != nullptr) {
    tier_->db_->ReleaseSnapshot(cut_->snapshot);
  }
}

absl::Status SparseTier::View::Wait() const {
  absl::MutexLock lock(&tier_->mu_);
  while (!cut_->done) tier_->changed_.Wait(&tier_->mu_);
  return cut_->status;
}

absl::Status SparseTier::View::ForEach(
    uint32_t table,
    const std::function<void(uint64_t id, std::string_view value)>& visit)
    const {
  PS_RETURN_IF_ERROR(Wait());
  return tier_->Scan(cut_->snapshot, table, visit);
}

absl::StatusOr<std::unique_ptr<SparseTier::View::Rows>>
SparseTier::View::RowsOf(uint32_t table) const {
  PS_RETURN_IF_ERROR(Wait());
  return std::unique_ptr<Rows>(
      new Rows(tier_->db_.get(), cut_->snapshot, table));
}

SparseTier::View::Rows::Rows(rocksdb::DB* db, const rocksdb::Snapshot* snapshot,
                             uint32_t table)
    : table_(table), upper_bytes_(4, '\0') {
  PutBigEndian(uint64_t{table} + 1, 4, upper_bytes_.data());
  upper_ = rocksdb::Slice(upper_bytes_);
  rocksdb::ReadOptions options;
  options.fill_cache = false;  // One pass over everything: keep the cache.
  options.snapshot = snapshot;
  options.readahead_size = size_t{1} << 20;  // The pass is sequential.
  if (table != ~uint32_t{0}) options.iterate_upper_bound = &upper_;
  it_.reset(db->NewIterator(options));
  std::string begin(4, '\0');
  PutBigEndian(table, 4, begin.data());
  it_->Seek(begin);
}

absl::Status SparseTier::View::Rows::Through(
    uint32_t bucket, const std::function<void(uint32_t bucket, uint64_t id,
                                              std::string_view value)>& visit) {
  for (; it_->Valid(); it_->Next()) {
    const rocksdb::Slice key = it_->key();
    if (key.size() != kKeyBytes || GetBigEndian(key.data(), 4) != table_) {
      break;
    }
    const auto b = static_cast<uint32_t>(GetBigEndian(key.data() + 4, 4));
    if (b > bucket) return absl::OkStatus();
    visit(b, GetBigEndian(key.data() + 8, 8),
          std::string_view(it_->value().data(), it_->value().size()));
  }
  return it_->status().ok()
             ? absl::OkStatus()
             : RocksDbStatusToAbsl(it_->status(), "sparse tier: scan");
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

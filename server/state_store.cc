#include "server/state_store.h"

#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rocksdb_status.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "server/shard_codec.h"

namespace ps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "stored floats are raw little-endian float32");

constexpr char kFamilyNames[][10] = {"default", "values", "optimizer",
                                     "clocks",  "meta",   "log"};
constexpr size_t kInt64Bytes = kStoredInt64Bytes;

// The first key past a job's range: job_id '\1'. Job ids contain no '\0', so
// every other job's keys fall outside [StoredJobPrefix, JobLimit).
std::string JobLimit(const std::string& job_id) {
  std::string limit = job_id;
  limit.push_back('\1');
  return limit;
}

void AppendBigEndian(uint64_t value, size_t bytes, std::string* out) {
  for (size_t i = bytes; i-- > 0;) {
    out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

void EncodeInt64(int64_t value, char out[kInt64Bytes]) {
  const uint64_t bits = static_cast<uint64_t>(value);
  for (size_t i = 0; i < kInt64Bytes; ++i) {
    out[i] = static_cast<char>((bits >> (8 * i)) & 0xff);
  }
}

int64_t DecodeStoredInt64(const char* in) {
  uint64_t bits = 0;
  for (size_t i = 0; i < kInt64Bytes; ++i) {
    bits |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  }
  return static_cast<int64_t>(bits);
}

std::string BlockKey(const std::string& prefix, uint64_t key) {
  std::string out = prefix;
  AppendBigEndian(key, kStoredBlockKeyBytes, &out);
  return out;
}

// A format-1 update-log record's key in the "log" family.
std::string LogRecordKey(const std::string& prefix, int64_t sequence) {
  std::string out = prefix;
  AppendBigEndian(static_cast<uint64_t>(sequence), kInt64Bytes, &out);
  return out;
}

std::string ClockKey(const std::string& prefix, int32_t worker) {
  std::string out = prefix;
  AppendBigEndian(static_cast<uint32_t>(worker), kStoredWorkerBytes, &out);
  return out;
}

rocksdb::Slice FloatSlice(std::span<const float> values) {
  return rocksdb::Slice(reinterpret_cast<const char*>(values.data()),
                        values.size_bytes());
}

std::string BlockName(uint64_t key) {
  return absl::StrCat("block key ", key, " (tensor ", key >> 32, ", block ",
                      key & 0xffffffffu, ")");
}

absl::string_view View(const rocksdb::Slice& slice) {
  return absl::string_view(slice.data(), slice.size());
}

// Column family options tuned for float blocks: they do not compress.
rocksdb::ColumnFamilyOptions FamilyOptions(size_t write_buffer_bytes) {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = write_buffer_bytes;
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  return options;
}

rocksdb::DBOptions DatabaseOptions(const StateStoreOptions& options) {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = options.create_if_missing;
  // A new database gets every family; an existing one only the "log" family
  // of format 1 (Open checks the others are there before it opens).
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  // Every write batch spans the families (values, optimizer state and
  // clocks), so they flush together: a flush then frees every log file it
  // covers. Flushed one by one, the small clocks and meta families would keep
  // every log alive until max_total_wal_size forced them out (90-250 MB of
  // log per server).
  db_options.atomic_flush = true;
  // Backstop on the live log (and so on the replay time after a crash): two
  // large memtables' worth.
  db_options.max_total_wal_size = 2 * options.write_buffer_bytes;
  // Log files are deleted once flushed, never kept for reuse: a closed or
  // idle store holds no log.
  db_options.recycle_log_file_num = 0;
  db_options.WAL_ttl_seconds = 0;
  db_options.WAL_size_limit_MB = 0;
  // RocksDB's informational LOG (flushes, compactions): at most 5 old files
  // of 1 MiB each besides the current one, so it cannot fill the disk either.
  db_options.max_log_file_size = size_t{1} << 20;
  db_options.keep_log_file_num = 5;
  return db_options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    const StateStoreOptions& options) {
  namespace fs = std::filesystem;
  const std::string& path = options.path;
  const std::string where = absl::StrCat("rocksdb shard store at ", path);
  std::error_code error;
  const bool existing = fs::exists(fs::path(path) / "CURRENT", error);
  if (!existing && !options.create_if_missing) {
    return absl::NotFoundError(absl::StrCat(
        where,
        ": the directory holds no RocksDB database (create_if_missing is "
        "false)"));
  }
  const rocksdb::DBOptions db_options = DatabaseOptions(options);
  if (existing) {
    // An existing database must already have the store's column families:
    // creating them would modify a database that belongs to something else.
    // Checked before opening: even a failed open may replay and flush another
    // database's log.
    std::vector<std::string> names;
    rocksdb::Status listed =
        rocksdb::DB::ListColumnFamilies(db_options, path, &names);
    if (!listed.ok()) {
      return RocksDbStatusToAbsl(listed, absl::StrCat("cannot open ", where));
    }
    const int required = options.add_missing_log_family ? kLog : kCount;
    for (int family = 0; family < required; ++family) {
      if (std::find(names.begin(), names.end(), kFamilyNames[family]) ==
          names.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            where,
            ": the directory holds a RocksDB database that is not a "
            "parameter-server shard store (no column family \"",
            kFamilyNames[family], "\"); refusing to modify it"));
      }
    }
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (int family = 0; family < kCount; ++family) {
    const bool large = family == kValues || family == kOptimizer;
    families.emplace_back(
        kFamilyNames[family],
        FamilyOptions(large ? options.write_buffer_bytes : size_t{4} << 20));
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw_db = nullptr;
  rocksdb::Status status =
      rocksdb::DB::Open(db_options, path, families, &handles, &raw_db);
  if (!status.ok()) {
    if (existing && status.IsInvalidArgument() &&
        absl::StrContains(status.ToString(), "olumn famil")) {
      return absl::FailedPreconditionError(
          absl::StrCat(where,
                       ": the directory holds a RocksDB database that is not a "
                       "parameter-server shard store; refusing to modify it (",
                       status.ToString(), ")"));
    }
    return RocksDbStatusToAbsl(status, absl::StrCat("cannot open ", where));
  }
  std::unique_ptr<rocksdb::DB> db(raw_db);
  PS_CHECK(handles.size() == kCount, "rocksdb returned ", handles.size(),
           " column family handles");
  return std::unique_ptr<StateStore>(
      new StateStore(options, std::move(db), std::move(handles)));
}

StateStore::StateStore(const StateStoreOptions& options,
                       std::unique_ptr<rocksdb::DB> db,
                       std::vector<rocksdb::ColumnFamilyHandle*> handles)
    : path_(options.path),
      unlogged_snapshot_bytes_(options.unlogged_snapshot_bytes),
      before_snapshot_flush_(options.before_snapshot_flush),
      db_(std::move(db)),
      handles_(std::move(handles)) {}

StateStore::~StateStore() {
  // A clean close leaves everything in table files and no log to replay:
  // flush the memtables (the flush deletes the log files it covers).
  if (absl::Status status = FlushAll("close"); !status.ok()) {
    PS_LOG_ERROR(status.message());
  }
  for (rocksdb::ColumnFamilyHandle* handle : handles_) {
    rocksdb::Status status = db_->DestroyColumnFamilyHandle(handle);
    if (!status.ok()) {
      PS_LOG_ERROR("rocksdb shard store at ", path_,
                   ": destroying a column family handle: ", status.ToString());
    }
  }
  handles_.clear();
  rocksdb::Status status = db_->Close();
  if (!status.ok()) {
    PS_LOG_ERROR("rocksdb shard store at ", path_,
                 ": close: ", status.ToString());
  }
  db_.reset();
}

absl::Status StateStore::PutSnapshot(const ShardWrite& write,
                                     uint64_t rows_file) {
  const std::string prefix = StoredJobPrefix(write.job_id);
  const std::string context =
      absl::StrCat("rocksdb shard store: job ", write.job_id, ": ");
  // The batch's bytes reserved once: a snapshot of a large sparse table is
  // hundreds of MB, which a growing batch would copy again at each doubling.
  size_t reserve = 64;
  size_t data_bytes = 0;  // Values, optimizer state and rows.
  for (const BlockWrite& block : write.blocks) {
    data_bytes += block.values.size_bytes() +
                  block.optimizer_state.size_bytes() +
                  (rows_file > 0 ? 0 : block.rows.size());
    reserve += 3 * (prefix.size() + 48);
  }
  reserve += data_bytes;
  reserve += write.worker_clocks.size() * (prefix.size() + 32);
  absl::ReleasableMutexLock lock(&batch_mu_);
  if (batch_ == nullptr || reserve > batch_capacity_ ||
      reserve < batch_capacity_ / 4) {
    batch_capacity_ = reserve + reserve / 4;
    batch_ = std::make_unique<rocksdb::WriteBatch>(batch_capacity_);
  } else {
    batch_->Clear();  // Keeps its bytes.
  }
  rocksdb::WriteBatch& batch = *batch_;
  for (const BlockWrite& block : write.blocks) {
    const std::string key = BlockKey(prefix, block.key);
    rocksdb::Status put =
        batch.Put(handles_[kValues], key, FloatSlice(block.values));
    char step[kInt64Bytes];
    EncodeInt64(block.optimizer_step, step);
    const rocksdb::Slice key_part(key);
    const rocksdb::Slice value_parts[] = {rocksdb::Slice(step, sizeof(step)),
                                          FloatSlice(block.optimizer_state)};
    if (put.ok()) {
      put = batch.Put(handles_[kOptimizer], rocksdb::SliceParts(&key_part, 1),
                      rocksdb::SliceParts(value_parts, 2));
    }
    if (put.ok() && IsBucketKey(block.key)) {
      // A bucket's rows record replaces (or, when empty, clears) the last.
      const std::string rows_key = key + kStoredRowsSuffix;
      put =
          block.rows.empty() || rows_file > 0
              ? batch.Delete(handles_[kValues], rows_key)
              : batch.Put(handles_[kValues], rows_key,
                          rocksdb::Slice(block.rows.data(), block.rows.size()));
    }
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        put, absl::StrCat(context, "batching ", BlockName(block.key))));
  }
  for (const auto& [worker, clock] : write.worker_clocks) {
    char value[kInt64Bytes];
    EncodeInt64(clock, value);
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        batch.Put(handles_[kClocks], ClockKey(prefix, worker),
                  rocksdb::Slice(value, sizeof(value))),
        absl::StrCat(context, "batching the clock of worker ", worker)));
  }
  PS_RETURN_IF_ERROR(BatchMarker(write, rows_file, batch));
  rocksdb::WriteOptions write_options;
  write_options.sync = write.sync;
  if (data_bytes < unlogged_snapshot_bytes_) {
    return RocksDbStatusToAbsl(db_->Write(write_options, &batch),
                               absl::StrCat(context, "write"));
  }
  // Unlogged: durable only once flushed. The memtables hold the batch whole
  // (a write lands in one memtable generation), and atomic_flush writes
  // every family's memtable in one step, so a crash leaves the batch in the
  // table files whole or not at all; until this returns, the caller keeps
  // the log records the snapshot replaces (CommitSnapshot).
  write_options.sync = false;
  write_options.disableWAL = true;
  PS_RETURN_IF_ERROR(
      RocksDbStatusToAbsl(db_->Write(write_options, &batch),
                          absl::StrCat(context, "write (unlogged)")));
  lock.Release();
  if (before_snapshot_flush_) before_snapshot_flush_();
  return FlushAll(absl::StrCat("job ", write.job_id, ": snapshot"));
}

absl::Status StateStore::BatchMarker(const ShardWrite& write,
                                     uint64_t rows_file,
                                     rocksdb::WriteBatch& batch) {
  const std::string prefix = StoredJobPrefix(write.job_id);
  const std::string context =
      absl::StrCat("rocksdb shard store: job ", write.job_id, ": ");
  // The write's sequence, or the stored one when the write has
  // none (as without rows files), then the rows file's number, if any; a
  // rows file named before is never named again by a snapshot without one.
  int64_t sequence = write.log_sequence;
  bool had_marker = false;
  if (sequence == 0) {
    std::string stored;
    rocksdb::Status got =
        db_->Get(rocksdb::ReadOptions(), handles_[kLog], prefix, &stored);
    if (!got.ok() && !got.IsNotFound()) {
      return RocksDbStatusToAbsl(got,
                                 absl::StrCat(context, "reading the marker"));
    }
    if (got.ok() && stored.size() >= kInt64Bytes) {
      had_marker = true;
      sequence = DecodeStoredInt64(stored.data());
    }
  }
  if (sequence > 0 || rows_file > 0) {
    char marker[2 * kInt64Bytes];
    EncodeInt64(sequence, marker);
    EncodeInt64(static_cast<int64_t>(rows_file), marker + kInt64Bytes);
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        batch.Put(handles_[kLog], prefix,
                  rocksdb::Slice(
                      marker, rows_file > 0 ? 2 * kInt64Bytes : kInt64Bytes)),
        absl::StrCat(context, "batching the snapshot's marker")));
  } else if (had_marker) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        batch.Delete(handles_[kLog], prefix),
        absl::StrCat(context, "batching the snapshot's marker")));
  }
  return absl::OkStatus();
}

absl::Status StateStore::PutMeta(const std::string& job_id,
                                 const std::string& meta) {
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return RocksDbStatusToAbsl(
      db_->Put(write_options, handles_[kMeta], StoredJobPrefix(job_id), meta),
      absl::StrCat("rocksdb shard store: job ", job_id, ": writing meta"));
}

template <typename Add>
absl::Status StateStore::Scan(Family family, const std::string& job_id,
                              const rocksdb::ReadOptions& read_options,
                              Add add) {
  const std::string prefix = StoredJobPrefix(job_id);
  const std::string limit = JobLimit(job_id);
  const rocksdb::Slice limit_slice(limit);
  rocksdb::ReadOptions bounded = read_options;
  bounded.iterate_upper_bound = &limit_slice;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(bounded, handles_[family]));
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    PS_RETURN_IF_ERROR(add(View(it->key()), View(it->value())));
  }
  return RocksDbStatusToAbsl(it->status(),
                             absl::StrCat("rocksdb shard store: job ", job_id,
                                          ": reading ", kFamilyNames[family]));
}

absl::StatusOr<uint64_t> StateStore::RowsFileOf(const std::string& job_id) {
  std::string marker;
  rocksdb::Status status = db_->Get(rocksdb::ReadOptions(), handles_[kLog],
                                    StoredJobPrefix(job_id), &marker);
  if (status.IsNotFound()) return 0;
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
      status, absl::StrCat("rocksdb shard store: job ", job_id,
                           ": reading the marker")));
  if (marker.size() == kInt64Bytes) return 0;
  if (marker.size() != 2 * kInt64Bytes) {
    return absl::DataLossError(absl::StrCat("rocksdb shard store: job ", job_id,
                                            ": marker of ", marker.size(),
                                            " bytes is malformed"));
  }
  return static_cast<uint64_t>(DecodeStoredInt64(marker.data() + kInt64Bytes));
}

absl::StatusOr<StoredJob> StateStore::Load(const std::string& job_id,
                                           uint64_t* rows_file) {
  if (rows_file != nullptr) *rows_file = 0;
  const std::string prefix = StoredJobPrefix(job_id);
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions read_options;
  read_options.snapshot = snapshot.snapshot();
  StoredJobDecoder decoder(job_id);
  std::string meta;
  rocksdb::Status status =
      db_->Get(read_options, handles_[kMeta], prefix, &meta);
  if (status.ok()) {
    decoder.SetMeta(std::move(meta));
  } else if (!status.IsNotFound()) {
    return RocksDbStatusToAbsl(
        status, absl::StrCat("rocksdb shard store: job ", job_id, ": load"));
  }
  // Values, then optimizer state, then clocks, then the marker, each in key
  // order: the order the decoder checks them in.
  PS_RETURN_IF_ERROR(Scan(kValues, job_id, read_options,
                          [&](absl::string_view key, absl::string_view value) {
                            return decoder.AddValues(key, value);
                          }));
  PS_RETURN_IF_ERROR(Scan(kOptimizer, job_id, read_options,
                          [&](absl::string_view key, absl::string_view value) {
                            return decoder.AddOptimizer(key, value);
                          }));
  PS_RETURN_IF_ERROR(Scan(kClocks, job_id, read_options,
                          [&](absl::string_view key, absl::string_view value) {
                            return decoder.AddClock(key, value);
                          }));
  PS_RETURN_IF_ERROR(Scan(
      kLog, job_id, read_options,
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        if (key.size() == prefix.size() + kInt64Bytes) {
          uint64_t sequence = 0;
          for (size_t i = prefix.size(); i < key.size(); ++i) {
            sequence = (sequence << 8) | static_cast<unsigned char>(key[i]);
          }
          return absl::DataLossError(absl::StrCat(
              "rocksdb shard store: job ", job_id, ": update log record ",
              sequence,
              " found in RocksDB's \"log\" family, which holds only snapshot "
              "markers since data directory format version 2"));
        }
        if (key.size() == prefix.size() && value.size() == 2 * kInt64Bytes) {
          // A marker that names the snapshot's rows file.
          const int64_t file = DecodeStoredInt64(value.data() + kInt64Bytes);
          if (file <= 0) {
            return absl::DataLossError(
                absl::StrCat("rocksdb shard store: job ", job_id,
                             ": the marker names rows file ", file));
          }
          if (rows_file != nullptr) *rows_file = static_cast<uint64_t>(file);
          value = value.substr(0, kInt64Bytes);
        }
        return decoder.AddLog(key, value);  // The marker (or malformed).
      }));
  return decoder.Finish();
}

absl::StatusOr<std::vector<std::string>> StateStore::ListJobs() {
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions read_options;
  read_options.snapshot = snapshot.snapshot();
  std::set<std::string> ids;
  for (int family = kValues; family < kCount; ++family) {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(read_options, handles_[family]));
    for (it->SeekToFirst(); it->Valid();) {
      const rocksdb::Slice key = it->key();
      const void* nul = std::memchr(key.data(), '\0', key.size());
      if (nul == nullptr) {
        return absl::DataLossError(
            absl::StrCat("rocksdb shard store: a key in column family ",
                         kFamilyNames[family], " has no job prefix"));
      }
      std::string id(key.data(), static_cast<const char*>(nul) - key.data());
      const std::string limit = JobLimit(id);
      ids.insert(std::move(id));
      it->Seek(limit);  // Skip the rest of this job's keys.
    }
    if (!it->status().ok()) {
      return RocksDbStatusToAbsl(it->status(),
                                 "rocksdb shard store: listing jobs");
    }
  }
  return std::vector<std::string>(ids.begin(), ids.end());
}

absl::Status StateStore::DeleteJob(const std::string& job_id,
                                   bool reclaim_space) {
  const std::string prefix = StoredJobPrefix(job_id);
  const std::string limit = JobLimit(job_id);
  const std::string context =
      absl::StrCat("rocksdb shard store: job ", job_id, ": delete");
  {
    absl::MutexLock lock(&batch_mu_);
    batch_.reset();
    batch_capacity_ = 0;
  }
  rocksdb::WriteBatch batch;
  for (int family = kValues; family < kCount; ++family) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        batch.DeleteRange(handles_[family], prefix, limit), context));
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  PS_RETURN_IF_ERROR(
      RocksDbStatusToAbsl(db_->Write(write_options, &batch), context));
  if (!reclaim_space) return absl::OkStatus();
  // The range deletions only hide the keys. Flushing frees the job's share of
  // the log; compacting the range rewrites the table files without the job's
  // keys (files holding nothing else are dropped).
  PS_RETURN_IF_ERROR(FlushAll(absl::StrCat("job ", job_id, ": delete")));
  const rocksdb::Slice begin(prefix);
  const rocksdb::Slice end(limit);
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction =
      rocksdb::BottommostLevelCompaction::kForceOptimized;
  for (int family = kValues; family < kCount; ++family) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        db_->CompactRange(compact, handles_[family], &begin, &end),
        absl::StrCat(context, ": compacting ", kFamilyNames[family])));
  }
  return absl::OkStatus();
}

absl::Status StateStore::FlushAll(absl::string_view why) {
  rocksdb::FlushOptions flush;
  flush.wait = true;
  return RocksDbStatusToAbsl(
      db_->Flush(flush, handles_),
      absl::StrCat("rocksdb shard store at ", path_, ": flush (", why, ")"));
}

absl::StatusOr<std::string> StateStore::Identity() const {
  std::string identity;
  rocksdb::Status status = db_->GetDbIdentity(identity);
  if (!status.ok()) {
    return RocksDbStatusToAbsl(status, "rocksdb shard store: identity");
  }
  // The IDENTITY file may end with a newline.
  while (!identity.empty() &&
         (identity.back() == '\n' || identity.back() == '\r')) {
    identity.pop_back();
  }
  return identity;
}

absl::StatusOr<std::vector<std::string>> StateStore::JobsWithFormat1Log() {
  std::vector<std::string> jobs;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), handles_[kLog]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const absl::string_view key = View(it->key());
    const size_t nul = key.find('\0');
    // A record's key is the prefix and 8 bytes; the marker's, the prefix.
    if (nul == absl::string_view::npos || key.size() == nul + 1) continue;
    std::string id(key.substr(0, nul));
    if (jobs.empty() || jobs.back() != id) jobs.push_back(std::move(id));
  }
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
      it->status(), "rocksdb shard store: listing format-1 update logs"));
  return jobs;
}

absl::StatusOr<Format1LogRecords> StateStore::ReadFormat1Log(
    const std::string& job_id) {
  // The decoder checks the marker and that the records follow it.
  StoredJobDecoder decoder(job_id);
  PS_RETURN_IF_ERROR(Scan(kLog, job_id, rocksdb::ReadOptions(),
                          [&](absl::string_view key, absl::string_view value) {
                            return decoder.AddLog(key, value);
                          }));
  absl::StatusOr<StoredJob> job = decoder.Finish();
  if (absl::IsNotFound(job.status())) return Format1LogRecords();
  PS_RETURN_IF_ERROR(job.status());
  return Format1LogRecords{.marker = job->log_sequence,
                           .records = std::move(job->log)};
}

absl::Status StateStore::DeleteFormat1Log(const std::string& job_id) {
  const std::string prefix = StoredJobPrefix(job_id);
  rocksdb::WriteBatch batch;
  const std::string context = absl::StrCat("rocksdb shard store: job ", job_id,
                                           ": deleting format-1 log records");
  // Every record key sorts after the marker's key (the prefix alone).
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
      batch.DeleteRange(handles_[kLog], LogRecordKey(prefix, 0),
                        JobLimit(job_id)),
      context));
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return RocksDbStatusToAbsl(db_->Write(write_options, &batch), context);
}

}  // namespace ps

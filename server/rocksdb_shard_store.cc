#include "server/rocksdb_shard_store.h"

#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/rocksdb_status.h"
#include "common/status_macros.h"
#include "server/shard_codec.h"

namespace ps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "stored floats are raw little-endian float32");

constexpr char kFamilyNames[][10] = {"default", "values", "optimizer",
                                     "clocks",  "meta",   "log"};
constexpr size_t kBlockKeyBytes = kStoredBlockKeyBytes;
constexpr size_t kWorkerBytes = kStoredWorkerBytes;
constexpr size_t kInt64Bytes = kStoredInt64Bytes;

// The first key of a job's range: job_id '\0'.
std::string JobPrefix(const std::string& job_id) {
  return StoredJobPrefix(job_id);
}

// The first key past a job's range: job_id '\1'. Job ids contain no '\0', so
// every other job's keys fall outside [JobPrefix, JobLimit).
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

std::string BlockKey(const std::string& prefix, uint64_t key) {
  std::string out = prefix;
  AppendBigEndian(key, kBlockKeyBytes, &out);
  return out;
}

std::string LogKey(const std::string& prefix, int64_t sequence) {
  std::string out = prefix;
  AppendBigEndian(static_cast<uint64_t>(sequence), kInt64Bytes, &out);
  return out;
}

std::string ClockKey(const std::string& prefix, int32_t worker) {
  std::string out = prefix;
  AppendBigEndian(static_cast<uint32_t>(worker), kWorkerBytes, &out);
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

// Column family options tuned for float blocks: they do not compress.
rocksdb::ColumnFamilyOptions FamilyOptions(size_t write_buffer_bytes) {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = write_buffer_bytes;
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RocksDbShardStore>> RocksDbShardStore::Open(
    const RocksDbShardStoreOptions& options) {
  namespace fs = std::filesystem;
  if (options.path.empty()) {
    return absl::InvalidArgumentError(
        "rocksdb shard store: options.path is required");
  }
  const std::string& path = options.path;
  const std::string where = absl::StrCat("rocksdb shard store at ", path);
  std::error_code error;
  const fs::file_status file = fs::status(path, error);
  if (error && file.type() != fs::file_type::not_found) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": cannot stat: ", error.message()));
  }
  if (file.type() == fs::file_type::not_found) {
    if (!options.create_if_missing) {
      return absl::NotFoundError(absl::StrCat(
          where, ": no such directory (create_if_missing is false)"));
    }
    fs::create_directories(path, error);
    if (error) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": cannot create the directory: ", error.message()));
    }
  } else if (file.type() != fs::file_type::directory) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the path exists and is not a directory"));
  }
  if (::access(path.c_str(), R_OK | W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(where, ": the directory is not readable and writable"));
  }
  if (!options.create_if_missing &&
      !fs::exists(fs::path(path) / "CURRENT", error)) {
    return absl::NotFoundError(absl::StrCat(
        where,
        ": the directory holds no RocksDB database (create_if_missing is "
        "false)"));
  }

  // An existing database must already have the store's column families:
  // creating them would modify a database that belongs to something else.
  const bool existing = fs::exists(fs::path(path) / "CURRENT", error);
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = options.create_if_missing;
  // An existing store made before the "log" family existed gets it added;
  // the other families must be there (checked below).
  db_options.create_missing_column_families = true;
  if (existing) {
    // Checked before opening: even a failed open may replay and flush another
    // database's log.
    std::vector<std::string> names;
    rocksdb::Status listed =
        rocksdb::DB::ListColumnFamilies(db_options, path, &names);
    if (!listed.ok()) {
      return RocksDbStatusToAbsl(listed, absl::StrCat("cannot open ", where));
    }
    for (int family = 0; family < kLog; ++family) {
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
  absl::StatusOr<std::unique_ptr<UpdateLogFiles>> log_files =
      UpdateLogFiles::Open(absl::StrCat(path, "/update-log"));
  if (!log_files.ok()) {
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      db->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
    }
    return log_files.status();
  }
  PS_LOG_INFO("rocksdb shard store: opened ", path);
  return std::unique_ptr<RocksDbShardStore>(new RocksDbShardStore(
      options, std::move(db), std::move(handles), *std::move(log_files)));
}

RocksDbShardStore::RocksDbShardStore(
    RocksDbShardStoreOptions options, std::unique_ptr<rocksdb::DB> db,
    std::vector<rocksdb::ColumnFamilyHandle*> handles,
    std::unique_ptr<UpdateLogFiles> log_files)
    : options_(std::move(options)),
      db_(std::move(db)),
      handles_(std::move(handles)),
      log_files_(std::move(log_files)) {}

RocksDbShardStore::~RocksDbShardStore() {
  // A clean close leaves everything in table files and no log to replay:
  // flush the memtables (the flush deletes the log files it covers).
  if (absl::Status status = FlushAll("close"); !status.ok()) {
    PS_LOG_ERROR(status.message());
  }
  for (rocksdb::ColumnFamilyHandle* handle : handles_) {
    rocksdb::Status status = db_->DestroyColumnFamilyHandle(handle);
    if (!status.ok()) {
      PS_LOG_ERROR("rocksdb shard store at ", options_.path,
                   ": destroying a column family handle: ", status.ToString());
    }
  }
  handles_.clear();
  rocksdb::Status status = db_->Close();
  if (!status.ok()) {
    PS_LOG_ERROR("rocksdb shard store at ", options_.path,
                 ": close: ", status.ToString());
  }
  db_.reset();
}

absl::Status RocksDbShardStore::Write(const ShardWrite& write) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status status = ValidateShardWrite(write); !status.ok()) {
    return status;
  }
  const std::string prefix = JobPrefix(write.job_id);
  rocksdb::WriteBatch batch;
  absl::Status status;
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
    if (!put.ok()) {
      status = RocksDbStatusToAbsl(
          put, absl::StrCat("rocksdb shard store: job ", write.job_id,
                            ": batching ", BlockName(block.key)));
      break;
    }
  }
  for (const auto& [worker, clock] : write.worker_clocks) {
    if (!status.ok()) break;
    char value[kInt64Bytes];
    EncodeInt64(clock, value);
    rocksdb::Status put = batch.Put(handles_[kClocks], ClockKey(prefix, worker),
                                    rocksdb::Slice(value, sizeof(value)));
    if (!put.ok()) {
      status = RocksDbStatusToAbsl(
          put, absl::StrCat("rocksdb shard store: job ", write.job_id,
                            ": batching the clock of worker ", worker));
    }
  }
  if (status.ok() && write.log_sequence > 0) {
    // The snapshot covers the log up to log_sequence: drop those records in
    // the same batch, so that a crash never leaves one without the other.
    char marker[kInt64Bytes];
    EncodeInt64(write.log_sequence, marker);
    rocksdb::Status put = batch.Put(handles_[kLog], prefix,
                                    rocksdb::Slice(marker, sizeof(marker)));
    if (put.ok()) {
      put = batch.DeleteRange(handles_[kLog], LogKey(prefix, 0),
                              LogKey(prefix, write.log_sequence + 1));
    }
    if (!put.ok()) {
      status = RocksDbStatusToAbsl(
          put, absl::StrCat("rocksdb shard store: job ", write.job_id,
                            ": batching the update log marker"));
    }
  }
  if (status.ok()) {
    rocksdb::WriteOptions write_options;
    write_options.sync = write.sync;
    status = RocksDbStatusToAbsl(
        db_->Write(write_options, &batch),
        absl::StrCat("rocksdb shard store: job ", write.job_id, ": write"));
  }
  if (status.ok() && write.log_sequence > 0) {
    // Only once the snapshot is durable: a crash before this leaves records
    // the marker says to skip.
    status =
        log_files_->DropThrough(write.job_id, write.log_sequence, write.sync);
  }
  if (options_.on_write_latency) {
    options_.on_write_latency(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return status;
}

absl::Status RocksDbShardStore::AppendLog(
    const std::string& job_id, int64_t first_sequence,
    const std::vector<std::string>& records, bool sync) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status status = ValidateLogAppend(job_id, first_sequence);
      !status.ok()) {
    return status;
  }
  if (records.empty()) return absl::OkStatus();
  absl::Status status =
      log_files_->Append(job_id, first_sequence, records, sync);
  if (options_.on_write_latency) {
    options_.on_write_latency(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return status;
}

absl::Status RocksDbShardStore::PutJobMeta(const std::string& job_id,
                                           const std::string& meta) {
  if (absl::Status status = ValidateShardStoreJobId(job_id); !status.ok()) {
    return status;
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  return RocksDbStatusToAbsl(
      db_->Put(write_options, handles_[kMeta], JobPrefix(job_id), meta),
      absl::StrCat("rocksdb shard store: job ", job_id, ": writing meta"));
}

absl::StatusOr<StoredJob> RocksDbShardStore::Load(const std::string& job_id) {
  if (absl::Status status = ValidateShardStoreJobId(job_id); !status.ok()) {
    return status;
  }
  const std::string prefix = JobPrefix(job_id);
  const std::string limit = JobLimit(job_id);
  const rocksdb::Slice limit_slice(limit);
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions read_options;
  read_options.snapshot = snapshot.snapshot();
  read_options.iterate_upper_bound = &limit_slice;
  const std::string context =
      absl::StrCat("rocksdb shard store: job ", job_id, ": load");

  StoredJobDecoder decoder(job_id);
  std::string meta;
  rocksdb::Status status =
      db_->Get(read_options, handles_[kMeta], prefix, &meta);
  if (status.ok()) {
    decoder.SetMeta(std::move(meta));
  } else if (!status.IsNotFound()) {
    return RocksDbStatusToAbsl(status, context);
  }
  // Values, then optimizer state, then clocks, then the update log, each in
  // key order: the order the decoder checks them in.
  const std::pair<Family, absl::Status (StoredJobDecoder::*)(absl::string_view,
                                                             absl::string_view)>
      families[] = {{kValues, &StoredJobDecoder::AddValues},
                    {kOptimizer, &StoredJobDecoder::AddOptimizer},
                    {kClocks, &StoredJobDecoder::AddClock},
                    {kLog, &StoredJobDecoder::AddLog}};
  for (const auto& [family, add] : families) {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(read_options, handles_[family]));
    for (it->Seek(prefix); it->Valid(); it->Next()) {
      const rocksdb::Slice key = it->key();
      const rocksdb::Slice value = it->value();
      if (absl::Status s =
              (decoder.*add)(absl::string_view(key.data(), key.size()),
                             absl::string_view(value.data(), value.size()));
          !s.ok()) {
        return s;
      }
    }
    if (!it->status().ok()) return RocksDbStatusToAbsl(it->status(), context);
  }
  absl::StatusOr<StoredJob> job = decoder.Finish();
  if (!job.ok() && !absl::IsNotFound(job.status())) return job.status();
  // The records in the job's file continue those of the family (if any).
  const int64_t after =
      job.ok() ? job->log_sequence + static_cast<int64_t>(job->log.size()) : 0;
  PS_ASSIGN_OR_RETURN(auto records, log_files_->Read(job_id, after));
  if (!job.ok()) {
    if (records.empty()) return job.status();
    job = StoredJob();  // Only a log, after no snapshot.
  }
  if (!records.empty() && records.front().first != after + 1) {
    return absl::DataLossError(absl::StrCat(
        "rocksdb shard store: job ", job_id, ": update log record ", after + 1,
        " is missing (the log file goes on at record ", records.front().first,
        ")"));
  }
  for (auto& [sequence, record] : records)
    job->log.push_back(std::move(record));
  return job;
}

absl::StatusOr<std::vector<std::string>> RocksDbShardStore::ListJobs() {
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
  PS_ASSIGN_OR_RETURN(std::vector<std::string> logged, log_files_->ListJobs());
  ids.insert(logged.begin(), logged.end());
  return std::vector<std::string>(ids.begin(), ids.end());
}

absl::Status RocksDbShardStore::DeleteJob(const std::string& job_id) {
  if (absl::Status status = ValidateShardStoreJobId(job_id); !status.ok()) {
    return status;
  }
  const std::string prefix = JobPrefix(job_id);
  const std::string limit = JobLimit(job_id);
  rocksdb::WriteBatch batch;
  for (int family = kValues; family < kCount; ++family) {
    rocksdb::Status status = batch.DeleteRange(handles_[family], prefix, limit);
    if (!status.ok()) {
      return RocksDbStatusToAbsl(
          status,
          absl::StrCat("rocksdb shard store: job ", job_id, ": delete"));
    }
  }
  rocksdb::WriteOptions write_options;
  write_options.sync = true;
  const std::string context =
      absl::StrCat("rocksdb shard store: job ", job_id, ": delete");
  if (absl::Status status =
          RocksDbStatusToAbsl(db_->Write(write_options, &batch), context);
      !status.ok()) {
    return status;
  }
  PS_RETURN_IF_ERROR(log_files_->Delete(job_id));
  // The range deletions only hide the keys. Flushing frees the job's share of
  // the log; compacting the range rewrites the table files without the job's
  // keys (files holding nothing else are dropped).
  if (absl::Status status = FlushAll(absl::StrCat("job ", job_id, ": delete"));
      !status.ok()) {
    return status;
  }
  const rocksdb::Slice begin(prefix);
  const rocksdb::Slice end(limit);
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction =
      rocksdb::BottommostLevelCompaction::kForceOptimized;
  for (int family = kValues; family < kCount; ++family) {
    if (absl::Status status = RocksDbStatusToAbsl(
            db_->CompactRange(compact, handles_[family], &begin, &end),
            absl::StrCat(context, ": compacting ", kFamilyNames[family]));
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status RocksDbShardStore::FlushAll(absl::string_view why) {
  rocksdb::FlushOptions flush;
  flush.wait = true;
  return RocksDbStatusToAbsl(
      db_->Flush(flush, handles_),
      absl::StrCat("rocksdb shard store at ", options_.path, ": flush (", why,
                   ")"));
}

absl::StatusOr<std::string> RocksDbShardStore::Identity() const {
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

}  // namespace ps

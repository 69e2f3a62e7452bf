#include "server/rocksdb_shard_store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "server/shard_store_upgrade.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

// Checks options.path and creates it when missing (and allowed). Errors as
// RocksDbShardStore::Open's.
absl::Status PrepareDirectory(const RocksDbShardStoreOptions& options) {
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
  return absl::OkStatus();
}

// Upgrades the format-1 directory at `path`, whose parts are open, to the
// current format, records it, and says so once.
absl::Status Upgrade(const std::string& path, StateStore& state,
                     UpdateLogFiles& log) {
  PS_ASSIGN_OR_RETURN(Format1Upgrade upgrade, UpgradeFromFormat1(state, log));
  PS_RETURN_IF_ERROR(WriteDataDirFormatVersion(path, kShardStoreDataDirFormat));
  PS_LOG_INFO("rocksdb shard store at ", path,
              ": upgraded the data directory from format version ",
              kUnrecordedDataDirVersion, " (no format record) to ",
              kShardStoreDataDirFormat.current_version, ": moved ",
              upgrade.records_moved, " update-log records of ",
              upgrade.jobs_moved, " jobs from RocksDB to the log files, ",
              "rewrote ", upgrade.files_converted,
              " log files of the first file format");
  return absl::OkStatus();
}

// A streamed snapshot's rows file entries: the write's own buckets with
// rows, then the source's, pulled one at a time.
class StreamedEntries final : public RowsFileEntries {
 public:
  StreamedEntries(const ShardWrite& write, BucketRowsSource& source)
      : write_(write), source_(source), buckets_(source.buckets()) {
    for (const BlockWrite& block : write.blocks) count_ += !block.rows.empty();
    for (const BucketRowsSize& bucket : buckets_) count_ += bucket.rows > 0;
  }
  uint64_t count() const override { return count_; }
  absl::StatusOr<RowsFileEntry> Next() override {
    while (block_ < write_.blocks.size()) {
      const BlockWrite& block = write_.blocks[block_++];
      if (!block.rows.empty()) return RowsFileEntry{block.key, block.rows};
    }
    while (bucket_ < buckets_.size() && buckets_[bucket_].rows == 0) ++bucket_;
    if (bucket_ == buckets_.size()) {
      return absl::InternalError("snapshot rows: a source ran out of buckets");
    }
    const BucketRowsSize& bucket = buckets_[bucket_++];
    PS_ASSIGN_OR_RETURN(const std::string_view rows, source_.Next());
    if (rows.size() != bucket.rows) {
      return absl::InternalError(absl::StrCat(
          "snapshot rows: bucket ", BucketIndex(bucket.key), " of table ",
          BucketTable(bucket.key), " came to ", rows.size(), " bytes, not the ",
          bucket.rows, " counted"));
    }
    return RowsFileEntry{bucket.key, rows};
  }

 private:
  const ShardWrite& write_;
  BucketRowsSource& source_;
  const std::span<const BucketRowsSize> buckets_;
  uint64_t count_ = 0;
  size_t block_ = 0;   // The next of write_.blocks.
  size_t bucket_ = 0;  // The next of buckets_.
};

// The records a durable snapshot covers dropped from the log: only once the
// snapshot is durable (a crash before leaves records the marker says to
// skip).
absl::Status DropCoveredRecords(UpdateLogFiles& log, const ShardWrite& write) {
  if (write.log_sequence == 0) return absl::OkStatus();
  return log.DropThrough(write.job_id, write.log_sequence, write.sync);
}

// The commit protocol with the rows in a file (docs/durability.md): the
// rows once (`write_file`), in the file the marker does not name; then the
// state store's batch naming it (`batch`: the blocks, clocks and marker);
// then the records it covers dropped.
absl::Status CommitWithRowsFile(
    StateStore& state, UpdateLogFiles& log, const ShardWrite& batch,
    absl::FunctionRef<absl::Status(uint64_t number)> write_file,
    const SnapshotRowsOptions& rows) {
  PS_ASSIGN_OR_RETURN(const uint64_t named, state.RowsFileOf(batch.job_id));
  const uint64_t number = named + 1;
  PS_RETURN_IF_ERROR(write_file(number));
  if (rows.after_rows_file) rows.after_rows_file();
  PS_RETURN_IF_ERROR(state.PutSnapshot(batch, number));
  return DropCoveredRecords(log, batch);
}

}  // namespace

absl::Status CommitStreamedSnapshot(StateStore& state, UpdateLogFiles& log,
                                    const ShardWrite& write,
                                    BucketRowsSource& source,
                                    const SnapshotRowsOptions& rows) {
  uint64_t rows_bytes = BucketRowsBytes(source);
  for (const BlockWrite& block : write.blocks) rows_bytes += block.rows.size();
  if (rows.files == nullptr || rows_bytes == 0 || rows_bytes < rows.min_bytes) {
    // Into the state store's batch: small by definition.
    std::vector<std::string> encoded;
    ShardWrite whole;
    PS_RETURN_IF_ERROR(Materialize(write, source, &encoded, &whole));
    return CommitSnapshot(state, log, whole, rows);
  }
  // CommitSnapshot's steps, step 0's file written as the source encodes it;
  // the state store's batch names the source's buckets too (their rows are
  // in the file: it clears their rows keys).
  ShardWrite keys = write;
  for (const BucketRowsSize& bucket : source.buckets()) {
    keys.blocks.push_back({.key = bucket.key});
  }
  StreamedEntries entries(write, source);
  return CommitWithRowsFile(
      state, log, keys,
      [&](uint64_t number) {
        return rows.files->Write(write.job_id, number, entries, write.sync);
      },
      rows);
}

absl::Status CommitSnapshot(StateStore& state, UpdateLogFiles& log,
                            const ShardWrite& write,
                            const SnapshotRowsOptions& rows) {
  size_t rows_bytes = 0;
  for (const BlockWrite& block : write.blocks) rows_bytes += block.rows.size();
  if (rows.files != nullptr && rows_bytes > 0 && rows_bytes >= rows.min_bytes) {
    std::vector<RowsFileEntry> entries;
    for (const BlockWrite& block : write.blocks) {
      if (!block.rows.empty()) entries.push_back({block.key, block.rows});
    }
    return CommitWithRowsFile(
        state, log, write,
        [&](uint64_t number) {
          return rows.files->Write(write.job_id, number, entries, write.sync);
        },
        rows);
  }
  PS_ASSIGN_OR_RETURN(const uint64_t named, rows.files != nullptr
                                                ? state.RowsFileOf(write.job_id)
                                                : absl::StatusOr<uint64_t>(0));
  PS_RETURN_IF_ERROR(state.PutSnapshot(write));
  // The marker names no file now: the job's files are dead bytes.
  if (named > 0) PS_RETURN_IF_ERROR(rows.files->Delete(write.job_id));
  return DropCoveredRecords(log, write);
}

absl::StatusOr<std::unique_ptr<RocksDbShardStore>> RocksDbShardStore::Open(
    const RocksDbShardStoreOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError(
        "rocksdb shard store: options.path is required");
  }
  const std::string& path = options.path;
  PS_RETURN_IF_ERROR(PrepareDirectory(options));
  // Before anything is written: a directory of an unknown version or kind is
  // left as it is.
  PS_ASSIGN_OR_RETURN(
      int version,
      ReadDataDirFormatVersion(path, kShardStoreDataDirFormat,
                               absl::StrCat("rocksdb shard store at ", path)));
  std::error_code error;
  if (options.create_if_missing &&
      !fs::exists(fs::path(path) / "CURRENT", error)) {
    // A new directory is of the current format from its first file on.
    PS_RETURN_IF_ERROR(
        WriteDataDirFormatVersion(path, kShardStoreDataDirFormat));
    version = kShardStoreDataDirFormat.current_version;
  }
  const bool format1 = version == kUnrecordedDataDirVersion;
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<StateStore> state,
      StateStore::Open({.path = path,
                        .create_if_missing = options.create_if_missing,
                        .write_buffer_bytes = options.write_buffer_bytes,
                        .add_missing_log_family = format1}));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<UpdateLogFiles> log,
                      UpdateLogFiles::Open(absl::StrCat(path, "/update-log")));
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<SnapshotRowsFiles> rows,
      SnapshotRowsFiles::Open(absl::StrCat(path, "/snapshot-rows")));
  if (format1) PS_RETURN_IF_ERROR(Upgrade(path, *state, *log));
  PS_LOG_INFO("rocksdb shard store: opened ", path);
  return std::unique_ptr<RocksDbShardStore>(new RocksDbShardStore(
      options, std::move(state), std::move(log), std::move(rows)));
}

RocksDbShardStore::RocksDbShardStore(RocksDbShardStoreOptions options,
                                     std::unique_ptr<StateStore> state,
                                     std::unique_ptr<UpdateLogFiles> log,
                                     std::unique_ptr<SnapshotRowsFiles> rows)
    : options_(std::move(options)),
      state_(std::move(state)),
      log_(std::move(log)),
      rows_(std::move(rows)) {}

RocksDbShardStore::~RocksDbShardStore() {
  log_.reset();
  state_.reset();
}

void RocksDbShardStore::ObserveLatencySince(
    std::chrono::steady_clock::time_point start) const {
  if (!options_.on_write_latency) return;
  options_.on_write_latency(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
}

absl::Status RocksDbShardStore::Write(const ShardWrite& write) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = ValidateShardWrite(write);
  if (!status.ok()) return status;
  status = CommitSnapshot(
      *state_, *log_, write,
      {.files = rows_.get(), .min_bytes = options_.rows_file_bytes});
  ObserveLatencySince(start);
  return status;
}

absl::Status RocksDbShardStore::WriteStreamed(const ShardWrite& write,
                                              BucketRowsSource& rows) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = ValidateShardWrite(write);
  if (!status.ok()) return status;
  status = CommitStreamedSnapshot(
      *state_, *log_, write, rows,
      {.files = rows_.get(), .min_bytes = options_.rows_file_bytes});
  ObserveLatencySince(start);
  return status;
}

absl::Status RocksDbShardStore::AppendLog(
    const std::string& job_id, int64_t first_sequence,
    const std::vector<std::string>& records, bool sync) {
  const auto start = std::chrono::steady_clock::now();
  PS_RETURN_IF_ERROR(ValidateLogAppend(job_id, first_sequence));
  if (records.empty()) return absl::OkStatus();
  absl::Status status = log_->Append(job_id, first_sequence, records, sync);
  ObserveLatencySince(start);
  return status;
}

absl::Status RocksDbShardStore::PutJobMeta(const std::string& job_id,
                                           const std::string& meta) {
  PS_RETURN_IF_ERROR(ValidateShardStoreJobId(job_id));
  return state_->PutMeta(job_id, meta);
}

absl::StatusOr<StoredJob> RocksDbShardStore::Load(const std::string& job_id) {
  PS_RETURN_IF_ERROR(ValidateShardStoreJobId(job_id));
  uint64_t rows_file = 0;
  absl::StatusOr<StoredJob> job = state_->Load(job_id, &rows_file);
  if (!job.ok() && !absl::IsNotFound(job.status())) return job.status();
  if (job.ok() && rows_file > 0) {
    PS_RETURN_IF_ERROR(ReadRowsFile(job_id, rows_file, &job->blocks));
  }
  // The records after the snapshot's marker (CommitSnapshot).
  const int64_t after = job.ok() ? job->log_sequence : 0;
  PS_ASSIGN_OR_RETURN(auto records, log_->Read(job_id, after));
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
  for (auto& [sequence, record] : records) {
    job->log.push_back(std::move(record));
  }
  return job;
}

absl::StatusOr<std::vector<std::string>> RocksDbShardStore::ListJobs() {
  PS_ASSIGN_OR_RETURN(std::vector<std::string> stored, state_->ListJobs());
  PS_ASSIGN_OR_RETURN(std::vector<std::string> logged, log_->ListJobs());
  std::set<std::string> ids(stored.begin(), stored.end());
  ids.insert(logged.begin(), logged.end());
  return std::vector<std::string>(ids.begin(), ids.end());
}

absl::Status RocksDbShardStore::DeleteJob(const std::string& job_id) {
  PS_RETURN_IF_ERROR(ValidateShardStoreJobId(job_id));
  PS_RETURN_IF_ERROR(state_->DeleteJob(job_id));
  PS_RETURN_IF_ERROR(rows_->Delete(job_id));
  return log_->Delete(job_id);
}

absl::Status RocksDbShardStore::DropJob(const std::string& job_id) {
  PS_RETURN_IF_ERROR(ValidateShardStoreJobId(job_id));
  PS_RETURN_IF_ERROR(state_->DeleteJob(job_id, /*reclaim_space=*/false));
  PS_RETURN_IF_ERROR(rows_->Delete(job_id));
  return log_->Delete(job_id);
}

absl::Status RocksDbShardStore::ReadRowsFile(
    const std::string& job_id, uint64_t number,
    std::vector<StoredBlock>* blocks) const {
  PS_ASSIGN_OR_RETURN(auto entries, rows_->Read(job_id, number));
  for (auto& [key, rows] : entries) {
    // Blocks are in key order; each of the file's buckets is one of them,
    // written without rows in the same snapshot.
    auto it = std::lower_bound(
        blocks->begin(), blocks->end(), key,
        [](const StoredBlock& b, uint64_t k) { return b.key < k; });
    if (it == blocks->end() || it->key != key || !IsBucketKey(key) ||
        !it->rows.empty()) {
      return absl::DataLossError(absl::StrCat(
          "rocksdb shard store: job ", job_id, ": snapshot rows file ",
          rows_->PathOf(job_id, number), " holds rows of block key ", key,
          ", which the snapshot holds no empty bucket of"));
    }
    it->rows = std::move(rows);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RocksDbShardStore::Identity() const {
  return state_->Identity();
}

absl::StatusOr<std::unique_ptr<ShardStore>> OpenLostStore(
    const std::string& data_dir) {
  RocksDbShardStoreOptions lost;
  lost.path = data_dir;
  lost.create_if_missing = false;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<RocksDbShardStore> store,
                      RocksDbShardStore::Open(lost));
  return std::unique_ptr<ShardStore>(std::move(store));
}

}  // namespace ps

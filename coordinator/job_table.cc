#include "coordinator/job_table.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data_dir_format.h"
#include "common/logging.h"
#include "common/rocksdb_status.h"
#include "common/status_macros.h"
#include "rocksdb/write_batch.h"

namespace ps {
namespace {

constexpr char kJobPrefix[] = "job/";
constexpr char kCounterKey[] = "meta/next_job";
constexpr char kSweepPrefix[] = "sweep/";
constexpr char kSweepCounterKey[] = "meta/next_sweep";
constexpr char kKindKey[] = "meta/kind";
constexpr char kKind[] = "ps-coordinator-job-table";
constexpr char kModelPrefix[] = "model/";
// SubmitJob request ids (SubmitJobRequest.request_id) -> the job they made.
constexpr char kRequestPrefix[] = "request/";

// The job table's data directory format (common/data_dir_format.h). Version
// 1: a directory without a format record, holding the keys above, with the
// kind marker (since 2026-11-21 11:50) or without it (the first tables, which
// hold only jobs, models and the job counter). Version 2: the keys above with
// the marker, recorded.
constexpr DataDirFormat kJobTableFormat = {
    .kind = "ps-coordinator-job-table",
    .description = "coordinator job table",
    .current_version = 2};

// True if every key of `db` is one the first job tables wrote, before the
// kind marker (2026-11-21, its first hour): job records, models and the job
// counter, which such a table always holds.
bool HoldsOnlyFirstTableKeys(rocksdb::DB& db) {
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
  bool counter = false;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key == kCounterKey) {
      counter = true;
    } else if (!key.starts_with(kJobPrefix) && !key.starts_with(kModelPrefix)) {
      return false;
    }
  }
  return it->status().ok() && counter;
}

// Whether the database at `path` is a job table, read through a read-only
// open, which modifies nothing (even a failed writable open may replay and
// flush another database's log): true with its kind marker, false for a
// table made before the marker. FAILED_PRECONDITION for any other database.
absl::StatusOr<bool> HasKindMarker(const rocksdb::Options& options,
                                   const std::string& path) {
  std::string kind;
  rocksdb::DB* reader = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, path, &reader);
  std::unique_ptr<rocksdb::DB> closer(reader);
  if (s.ok()) s = reader->Get(rocksdb::ReadOptions(), kKindKey, &kind);
  if (s.ok() && kind == kKind) return true;
  if (reader != nullptr && s.IsNotFound() && HoldsOnlyFirstTableKeys(*reader)) {
    return false;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "job table at ", path,
      ": the directory holds a RocksDB database that is not a coordinator "
      "job table; refusing to modify it (",
      s.ToString(), ")"));
}

}  // namespace

JobTable::JobTable(std::unique_ptr<rocksdb::DB> db,
                   std::shared_ptr<rocksdb::Env> env)
    : env_(std::move(env)), db_(std::move(db)) {}
JobTable::~JobTable() {
  // A clean close leaves everything in table files and no write-ahead log
  // (trained models are large) to replay.
  rocksdb::FlushOptions flush;
  flush.wait = true;
  if (rocksdb::Status s = db_->Flush(flush); !s.ok()) {
    PS_LOG_ERROR("job table: flush at close: ", s.ToString());
  }
  if (rocksdb::Status s = db_->Close(); !s.ok()) {
    PS_LOG_ERROR("job table: close: ", s.ToString());
  }
}

absl::StatusOr<std::unique_ptr<JobTable>> JobTable::Open(
    const std::string& path, const JobTableOptions& table_options) {
  const std::string where = absl::StrCat("job table at ", path);
  std::error_code error;
  if (std::filesystem::exists(path, error) &&
      !std::filesystem::is_directory(path, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the path exists and is not a directory"));
  }
  // Before anything is written: a directory of an unknown version or kind is
  // left as it is.
  PS_ASSIGN_OR_RETURN(int version,
                      ReadDataDirFormatVersion(path, kJobTableFormat, where));
  const bool existing =
      std::filesystem::exists(std::filesystem::path(path) / "CURRENT", error);
  rocksdb::Options options;
  options.create_if_missing = true;
  if (table_options.env != nullptr) options.env = table_options.env.get();
  options.statistics = table_options.statistics;
  bool marked = false;  // A new table gets its marker below.
  if (existing) {
    PS_ASSIGN_OR_RETURN(marked, HasKindMarker(options, path));
    if (!marked && version != kUnrecordedDataDirVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": the database has no kind marker, which format version ",
          version, " requires; refusing to modify it"));
    }
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &raw);
  if (!s.ok()) return RocksDbStatusToAbsl(s, where);
  std::unique_ptr<rocksdb::DB> db(raw);
  if (!marked) {
    rocksdb::WriteOptions sync;
    sync.sync = true;
    PS_RETURN_IF_ERROR(
        RocksDbStatusToAbsl(db->Put(sync, kKindKey, kKind), where));
  }
  if (!existing || version == kUnrecordedDataDirVersion) {
    PS_RETURN_IF_ERROR(WriteDataDirFormatVersion(path, kJobTableFormat));
  }
  if (existing && version == kUnrecordedDataDirVersion) {
    // Version 1 holds the keys of version 2, but for the kind marker of the
    // first tables, added above.
    PS_LOG_INFO(where, ": upgraded the data directory from format version ",
                kUnrecordedDataDirVersion, " (no format record",
                marked ? "" : ", no kind marker", ") to ",
                kJobTableFormat.current_version);
  }
  return std::unique_ptr<JobTable>(
      new JobTable(std::move(db), table_options.env));
}

absl::Status JobTable::Put(const v1::JobStatus& job) {
  rocksdb::WriteOptions options;
  options.sync = true;
  return RocksDbStatusToAbsl(
      db_->Put(options, absl::StrCat(kJobPrefix, job.job_id()),
               job.SerializeAsString()),
      absl::StrCat("job table write of ", job.job_id()));
}

absl::StatusOr<std::vector<v1::JobStatus>> JobTable::LoadAll() {
  std::vector<v1::JobStatus> jobs;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(kJobPrefix); it->Valid() && it->key().starts_with(kJobPrefix);
       it->Next()) {
    v1::JobStatus job;
    if (!job.ParseFromArray(it->value().data(), it->value().size())) {
      return absl::DataLossError(
          absl::StrCat("job table: unreadable record ", it->key().ToString()));
    }
    jobs.push_back(std::move(job));
  }
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(it->status(), "job table scan"));
  return jobs;
}

absl::Status JobTable::Create(v1::JobStatus* job) {
  absl::MutexLock lock(&counter_mu_);
  std::string value;
  int64_t number = 1;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kCounterKey, &value);
  if (s.ok()) {
    if (!absl::SimpleAtoi(value, &number)) {
      return absl::DataLossError("job table: unreadable job counter");
    }
  } else if (!s.IsNotFound()) {
    return RocksDbStatusToAbsl(s, "job table counter");
  }
  job->set_job_id(JobId(number));
  rocksdb::WriteBatch batch;
  batch.Put(kCounterKey, absl::StrCat(number + 1));
  batch.Put(absl::StrCat(kJobPrefix, job->job_id()), job->SerializeAsString());
  rocksdb::WriteOptions options;
  options.sync = true;
  return RocksDbStatusToAbsl(
      db_->Write(options, &batch),
      absl::StrCat("job table write of new job ", job->job_id()));
}

std::string JobTable::JobId(int64_t number) {
  return absl::StrFormat("job-%06d", number);
}

bool JobTable::IsJobId(const std::string& id) {
  constexpr absl::string_view kPrefix = "job-";
  if (id.size() <= kPrefix.size() || id.size() > 24 ||
      absl::string_view(id).substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  return std::all_of(id.begin() + kPrefix.size(), id.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

absl::Status JobTable::Write(const Batch& batch) {
  const std::string what =
      absl::StrCat("job table write of ", batch.puts.size(), " records and ",
                   batch.deletes.size(), " deletions");
  rocksdb::WriteBatch writes;
  for (const auto& [job_id, record] : batch.puts) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        writes.Put(absl::StrCat(kJobPrefix, job_id), record), what));
  }
  for (const std::string& job_id : batch.deletes) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        writes.Delete(absl::StrCat(kJobPrefix, job_id)), what));
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        writes.Delete(absl::StrCat(kModelPrefix, job_id)), what));
  }
  for (const auto& [request_id, job_id] : batch.put_request_ids) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        writes.Put(absl::StrCat(kRequestPrefix, request_id), job_id), what));
  }
  for (const std::string& request_id : batch.delete_request_ids) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        writes.Delete(absl::StrCat(kRequestPrefix, request_id)), what));
  }
  if (batch.next_job_number > 0) {
    PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
        writes.Put(kCounterKey, absl::StrCat(batch.next_job_number)), what));
  }
  rocksdb::WriteOptions options;
  options.sync = true;
  return RocksDbStatusToAbsl(db_->Write(options, &writes), what);
}

absl::Status JobTable::CompactModels(const std::string& first_job_id,
                                     const std::string& last_job_id) {
  const std::string begin = absl::StrCat(kModelPrefix, first_job_id);
  const std::string end =
      absl::StrCat(kModelPrefix, last_job_id, std::string(1, '\0'));
  const rocksdb::Slice begin_slice(begin), end_slice(end);
  return RocksDbStatusToAbsl(db_->CompactRange(rocksdb::CompactRangeOptions(),
                                               &begin_slice, &end_slice),
                             "job table compaction of deleted models");
}

absl::StatusOr<int64_t> JobTable::NextJobNumber() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kCounterKey, &value);
  if (s.IsNotFound()) return 1;
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(s, "job table counter"));
  int64_t number = 0;
  if (!absl::SimpleAtoi(value, &number) || number < 1) {
    return absl::DataLossError("job table: unreadable job counter");
  }
  return number;
}

absl::StatusOr<std::map<std::string, std::string>> JobTable::LoadRequestIds() {
  std::map<std::string, std::string> ids;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  const size_t prefix = sizeof(kRequestPrefix) - 1;
  for (it->Seek(kRequestPrefix);
       it->Valid() && it->key().starts_with(kRequestPrefix); it->Next()) {
    ids[it->key().ToString().substr(prefix)] = it->value().ToString();
  }
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(it->status(), "job table scan"));
  return ids;
}

absl::Status JobTable::PutModel(const v1::TrainedModel& model) {
  rocksdb::WriteOptions options;
  options.sync = true;
  return RocksDbStatusToAbsl(
      db_->Put(options, absl::StrCat(kModelPrefix, model.job_id()),
               model.SerializeAsString()),
      absl::StrCat("job table write of the model of ", model.job_id()));
}

absl::StatusOr<v1::TrainedModel> JobTable::GetModel(const std::string& job_id) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(),
                               absl::StrCat(kModelPrefix, job_id), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " has no stored model"));
  }
  if (!s.ok()) {
    return RocksDbStatusToAbsl(
        s, absl::StrCat("job table read of the model of ", job_id));
  }
  v1::TrainedModel model;
  if (!model.ParseFromString(value)) {
    return absl::DataLossError(
        absl::StrCat("job table: unreadable model of ", job_id));
  }
  return model;
}

absl::Status JobTable::Delete(const std::string& job_id) {
  const std::string what = absl::StrCat("job table delete of ", job_id);
  rocksdb::WriteBatch batch;
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
      batch.Delete(absl::StrCat(kJobPrefix, job_id)), what));
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(
      batch.Delete(absl::StrCat(kModelPrefix, job_id)), what));
  rocksdb::WriteOptions options;
  options.sync = true;
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(db_->Write(options, &batch), what));
  // The deletes only hide the model; compacting its key drops its bytes (a
  // model is up to --max_model_bytes).
  const std::string begin = absl::StrCat(kModelPrefix, job_id);
  const std::string end = absl::StrCat(begin, std::string(1, '\0'));
  const rocksdb::Slice begin_slice(begin), end_slice(end);
  return RocksDbStatusToAbsl(db_->CompactRange(rocksdb::CompactRangeOptions(),
                                               &begin_slice, &end_slice),
                             what);
}

absl::Status JobTable::CreateSweep(v1::SweepStatus* sweep) {
  absl::MutexLock lock(&counter_mu_);
  std::string value;
  int64_t number = 1;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), kSweepCounterKey, &value);
  if (s.ok()) {
    if (!absl::SimpleAtoi(value, &number)) {
      return absl::DataLossError("job table: unreadable sweep counter");
    }
  } else if (!s.IsNotFound()) {
    return RocksDbStatusToAbsl(s, "job table sweep counter");
  }
  sweep->set_sweep_id(absl::StrFormat("sweep-%06d", number));
  rocksdb::WriteBatch batch;
  batch.Put(kSweepCounterKey, absl::StrCat(number + 1));
  batch.Put(absl::StrCat(kSweepPrefix, sweep->sweep_id()),
            sweep->SerializeAsString());
  rocksdb::WriteOptions options;
  options.sync = true;
  return RocksDbStatusToAbsl(
      db_->Write(options, &batch),
      absl::StrCat("job table write of new sweep ", sweep->sweep_id()));
}

absl::Status JobTable::PutSweep(const v1::SweepStatus& sweep) {
  rocksdb::WriteOptions options;
  options.sync = true;
  return RocksDbStatusToAbsl(
      db_->Put(options, absl::StrCat(kSweepPrefix, sweep.sweep_id()),
               sweep.SerializeAsString()),
      absl::StrCat("job table write of ", sweep.sweep_id()));
}

absl::StatusOr<std::vector<v1::SweepStatus>> JobTable::LoadSweeps() {
  std::vector<v1::SweepStatus> sweeps;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(kSweepPrefix);
       it->Valid() && it->key().starts_with(kSweepPrefix); it->Next()) {
    v1::SweepStatus sweep;
    if (!sweep.ParseFromArray(it->value().data(), it->value().size())) {
      return absl::DataLossError(
          absl::StrCat("job table: unreadable record ", it->key().ToString()));
    }
    sweeps.push_back(std::move(sweep));
  }
  PS_RETURN_IF_ERROR(RocksDbStatusToAbsl(it->status(), "job table sweep scan"));
  return sweeps;
}

}  // namespace ps

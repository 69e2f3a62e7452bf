// The persistence interface of a parameter server's shards
// (docs/durability.md): per job, a snapshot (block values, optimizer state and
// per-worker clocks, written atomically) and an update log of what was applied
// since the snapshot.
// Struct members all carry initializers, so designated initializers may omit
// any of them without -Wmissing-field-initializers warnings.
#ifndef PS_SERVER_SHARD_STORE_H_
#define PS_SERVER_SHARD_STORE_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/sparse_keys.h"
#include "server/bucket_rows_source.h"

namespace ps {

// One block's state as written: spans point into the caller's memory for the
// duration of the call.
struct BlockWrite {
  // The block's key: (tensor_index << 32) | block_index.
  uint64_t key = 0;
  // The block's parameter values.
  std::span<const float> values{};
  // Optimizer slots, concatenated; may be empty.
  std::span<const float> optimizer_state{};
  // Updates applied so far (Adam bias correction).
  int64_t optimizer_step = 0;
  // A sparse table's bucket (IsBucketKey(key), common/sparse_keys.h) only:
  // its rows as opaque bytes (format: server/sparse_bucket_codec.h); empty
  // for a dense block. A bucket's write replaces its stored rows, so empty
  // rows clear them.
  std::string_view rows{};
};

// One atomic write for a job: block states and the worker clocks they advance.
struct ShardWrite {
  // The job written to. Required: non-empty, without '\0'.
  std::string job_id{};
  // Block states to store, replacing what is stored under the same keys.
  std::vector<BlockWrite> blocks{};
  // (worker index, clock) pairs to store; worker indices must be >= 0.
  std::vector<std::pair<int32_t, int64_t>> worker_clocks{};
  // The last update-log record this state includes (0: none). Write stores
  // it, which Load returns, and drops the job's log records with sequence <=
  // log_sequence: Load never returns them, crash or not (the RocksDB store:
  // CommitSnapshot in rocksdb_shard_store.h). Must be >= 0.
  int64_t log_sequence = 0;
  // fsync before returning (survives a machine crash). Default false: the
  // write survives a process crash only.
  bool sync = false;
};

// A stored block, as loaded.
struct StoredBlock {
  uint64_t key = 0;
  std::vector<float> values{};
  std::vector<float> optimizer_state{};
  int64_t optimizer_step = 0;
  // A bucket's rows as written (BlockWrite::rows); empty for a dense block
  // and for a block stored before rows existed.
  std::string rows{};
};

// Everything stored for one job.
struct StoredJob {
  std::string meta{};  // opaque bytes from PutJobMeta ("" if none)
  std::vector<StoredBlock> blocks{};  // in key order
  std::map<int32_t, int64_t> worker_clocks{};
  // The log_sequence of the last Write (0 if none set one).
  int64_t log_sequence = 0;
  // The update-log records appended after log_sequence, in sequence order:
  // record i has sequence log_sequence + 1 + i.
  std::vector<std::string> log{};
};

// Where a server keeps its shards. Implementations are thread-safe.
//
// Job ids must be non-empty and must not contain '\0'; other ids are refused
// with INVALID_ARGUMENT by every method.
class ShardStore {
 public:
  virtual ~ShardStore() = default;

  // Applies every part of `write` or none of it (a crash never leaves a block
  // without the clock written with it). A block or clock already stored under
  // the same key is replaced. Errors: INVALID_ARGUMENT for a bad job id or a
  // negative worker index; storage errors otherwise.
  virtual absl::Status Write(const ShardWrite& write) = 0;

  // Write of `write` with more buckets after write.blocks, which `rows`
  // encodes one at a time (a tiered sparse table's snapshot: docs/sparse.md,
  // "Snapshots of a tiered table"): the same stored state as Write of the
  // whole. A store that writes large snapshots' rows to a file of their own
  // (RocksDbShardStore) streams them there, holding one bucket's rows at a
  // time; the default encodes them all, then calls Write. Errors: Write's,
  // and the source's (nothing of the write is then stored).
  virtual absl::Status WriteStreamed(const ShardWrite& write,
                                     BucketRowsSource& rows) {
    return WriteMaterialized(*this, write, rows);
  }

  // Appends `records` to the job's update log with sequences first_sequence,
  // first_sequence + 1, ...; opaque bytes. Durable like Write (sync: fsync
  // first). The log must continue without a gap: first_sequence is one past
  // the last record appended or the last Write's log_sequence. Errors:
  // INVALID_ARGUMENT for a bad job id or first_sequence < 1; storage errors.
  virtual absl::Status AppendLog(const std::string& job_id,
                                 int64_t first_sequence,
                                 const std::vector<std::string>& records,
                                 bool sync) = 0;

  // Stores opaque job metadata (the server stores its serialized assignment),
  // replacing any stored before. Durable like Write with sync=true.
  virtual absl::Status PutJobMeta(const std::string& job_id,
                                  const std::string& meta) = 0;

  // Everything stored for job_id. NOT_FOUND if nothing is stored for it;
  // DATA_LOSS if a stored value is malformed.
  virtual absl::StatusOr<StoredJob> Load(const std::string& job_id) = 0;

  // Ids of jobs with anything stored, sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListJobs() = 0;

  // Removes everything stored for the job (no error if nothing was stored).
  virtual absl::Status DeleteJob(const std::string& job_id) = 0;

  // DeleteJob, as durably, without waiting for the job's disk space to come
  // back (the RocksDB store: no flush or compaction; its later compactions
  // reclaim it): for a server move, which replaces a job's state, or drops
  // a staged copy, while the job's training waits. Default: DeleteJob.
  virtual absl::Status DropJob(const std::string& job_id) {
    return DeleteJob(job_id);
  }
};

// OK if `job_id` is a valid job id for a ShardStore (non-empty, no '\0');
// INVALID_ARGUMENT otherwise. Thread-safe.
inline absl::Status ValidateShardStoreJobId(const std::string& job_id) {
  if (job_id.empty()) {
    return absl::InvalidArgumentError("shard store: job id must not be empty");
  }
  if (job_id.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "shard store: job id must not contain '\\0'");
  }
  return absl::OkStatus();
}

// OK if `write` is acceptable to ShardStore::Write (valid job id,
// log_sequence >= 0, worker indices >= 0, rows only on bucket keys);
// INVALID_ARGUMENT naming the problem otherwise. Thread-safe.
inline absl::Status ValidateShardWrite(const ShardWrite& write) {
  if (absl::Status status = ValidateShardStoreJobId(write.job_id);
      !status.ok()) {
    return status;
  }
  if (write.log_sequence < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard store: job ", write.job_id,
                     ": log_sequence must be >= 0, got ", write.log_sequence));
  }
  for (const BlockWrite& block : write.blocks) {
    if (!block.rows.empty() && !IsBucketKey(block.key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard store: job ", write.job_id, ": block key ",
                       block.key, " has rows but is not a bucket key"));
    }
  }
  for (const auto& [worker, clock] : write.worker_clocks) {
    if (worker < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard store: job ", write.job_id,
                       ": worker index must be >= 0, got ", worker));
    }
  }
  return absl::OkStatus();
}

// OK if AppendLog may take these arguments (valid job id, first_sequence >=
// 1); INVALID_ARGUMENT naming the problem otherwise. Thread-safe.
inline absl::Status ValidateLogAppend(const std::string& job_id,
                                      int64_t first_sequence) {
  if (absl::Status status = ValidateShardStoreJobId(job_id); !status.ok()) {
    return status;
  }
  if (first_sequence < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard store: job ", job_id,
                     ": first_sequence must be >= 1, got ", first_sequence));
  }
  return absl::OkStatus();
}

}  // namespace ps

#endif  // PS_SERVER_SHARD_STORE_H_

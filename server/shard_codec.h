// Decoding of the state store's records (layout in server/state_store.h) into
// a StoredJob, apart from RocksDB: StateStore::Load feeds it what its
// iterators read, and a fuzz target feeds it anything.
#ifndef PS_SERVER_SHARD_CODEC_H_
#define PS_SERVER_SHARD_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/shard_store.h"

namespace ps {

// Bytes of a block key, of a worker index, and of an int64, in stored keys and
// values.
inline constexpr size_t kStoredBlockKeyBytes = 8;
inline constexpr size_t kStoredWorkerBytes = 4;
inline constexpr size_t kStoredInt64Bytes = 8;
// The byte after a bucket's block key that makes the key of its rows record
// in the "values" family (layout in server/state_store.h).
inline constexpr char kStoredRowsSuffix = 'r';

// The first key of a job's range: job_id '\0'.
std::string StoredJobPrefix(const std::string& job_id);

// Builds one job's StoredJob from its records. Values must be added in key
// order, then the optimizer records in key order (one per block with values),
// then the clocks. Every size is checked: a malformed record is DATA_LOSS
// naming the job and the key, and nothing is trusted that was not checked.
// Not thread-safe.
class StoredJobDecoder {
 public:
  explicit StoredJobDecoder(std::string job_id);

  // The job's meta record, if there is one.
  void SetMeta(std::string meta);
  // A "values" family record: job prefix, 8-byte big-endian block key ->
  // float32s; or a bucket's rows record: the same key of the block added
  // just before (a bucket key), then kStoredRowsSuffix -> opaque row bytes.
  absl::Status AddValues(absl::string_view key, absl::string_view value);
  // An "optimizer" record: the same key -> int64 step then float32 slots.
  absl::Status AddOptimizer(absl::string_view key, absl::string_view value);
  // A "clocks" record: job prefix, 4-byte big-endian worker -> int64 clock.
  // The store keeps clocks and steps as opaque int64s; their ranges are the
  // reader's to check (ServerJob does).
  absl::Status AddClock(absl::string_view key, absl::string_view value);
  // A "log" family record, after the clocks, in key order: the marker (key
  // job_id '\0' alone -> int64 log_sequence of the last snapshot) first, then,
  // in a format-1 directory only (StateStore::ReadFormat1Log), update-log
  // records: job prefix + 8-byte big-endian sequence -> opaque record.
  // DATA_LOSS for a malformed key or marker, or a sequence that does not
  // follow the marker and the records before it without a gap.
  absl::Status AddLog(absl::string_view key, absl::string_view value);
  // The job, once every record is added. DATA_LOSS for values without
  // optimizer state; NOT_FOUND if nothing at all was stored for the job.
  absl::StatusOr<StoredJob> Finish();

 private:
  absl::Status DataLoss(absl::string_view what) const;
  // AddValues for a rows record.
  absl::Status AddRows(absl::string_view key, absl::string_view value);

  const std::string job_id_;
  const std::string prefix_;
  StoredJob job_;
  bool has_meta_ = false;
  bool has_log_ = false;
  size_t next_optimizer_ = 0;  // Blocks matched with optimizer state so far.
};

}  // namespace ps

#endif  // PS_SERVER_SHARD_CODEC_H_

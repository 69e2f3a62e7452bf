// Reader for Criteo's display-advertising TSV (docs/sparse.md, "Data: the
// Criteo format and the generator"): one sample a line,
// "label <TAB> I1..I13 <TAB> C1..C26", the label 0 or 1, I1..I13 decimal
// integers (possibly negative), C1..C26 32-bit values in hex; any feature
// empty when missing.
#ifndef PS_COMMON_CRITEO_READER_H_
#define PS_COMMON_CRITEO_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/criteo_format.h"

namespace ps {

// Row id of categorical value `value` of field `field` (0-based, C1 is 0):
// (uint64(field) << 33) | (1 << 32) | value. A bijection (values are 32
// bits), so no hashing is needed and distinct values never collide.
// Thread-safe.
inline constexpr uint64_t CriteoId(int field, uint32_t value) {
  return (static_cast<uint64_t>(field) << 33) | (uint64_t{1} << 32) | value;
}

// Row id of a missing value of field `field`: uint64(field) << 33, an id of
// its own per field, distinct from every CriteoId. Thread-safe.
inline constexpr uint64_t CriteoMissingId(int field) {
  return static_cast<uint64_t>(field) << 33;
}

// Samples of a CTR data set, row-major.
struct CtrDataset {
  int num_dense = kCriteoDenseFeatures;
  int num_fields = kCriteoFields;
  std::vector<int32_t> labels;  // 0 or 1.
  // size() x num_dense: log(1 + max(x, 0)) of each integer x, as DLRM
  // does; a missing integer is 0.
  std::vector<float> dense;
  // size() x num_fields: CriteoId(field, value), or CriteoMissingId(field).
  std::vector<uint64_t> ids;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  // Samples of the source read (the other shards' included; CriteoShard).
  int64_t source_samples = 0;
};

// Which samples of a file a reader keeps: sample i (counting non-empty lines
// from 0) when i % num_parts == part. A worker of N keeps its own 1/N, so no
// worker holds the whole training set.
struct CriteoShard {
  int part = 0;       // In [0, num_parts).
  int num_parts = 1;  // >= 1.

  // The source sample that is sample `j` of this shard.
  int64_t SourceSample(int64_t j) const { return j * num_parts + part; }
};

// Parses Criteo `text` (named `name` in errors), keeping at most
// max_samples samples (0 or negative: all). Lines end in \n or \r\n; empty
// lines are skipped. Each line has exactly 40 tab-separated fields: the
// label ("0" or "1"), 13 decimal integers that fit 64 bits, 26 hex values
// (digits 0-9, a-f, A-F) of at most 32 bits; any of the 39 features may be
// empty (missing). Thread-safe. Errors: INVALID_ARGUMENT "NAME:LINE: ..."
// naming the field (the label, I1..I13, C1..C26) and what is wrong (a wrong
// field count, a label other than 0 or 1, an integer that is not one, a
// value that is not hex or is over 32 bits, a line over 1 MiB), or
// "NAME: no samples".
absl::StatusOr<CtrDataset> ParseCriteoText(absl::string_view text,
                                           absl::string_view name,
                                           int64_t max_samples = 0);

// Reads the Criteo file `path` (plain or gzip; zlib tells which) as
// ParseCriteoText does, in chunks (the file is never held whole), stopping
// after max_samples samples (0 or negative: all). Thread-safe. Errors:
// NOT_FOUND naming the path for a missing file; DATA_LOSS for a corrupt
// gzip stream; ParseCriteoText's, naming `path` and the line.
// With `shard`, only its samples are parsed and kept (the others' lines are
// counted, not checked); max_samples still counts the source's samples.
absl::StatusOr<CtrDataset> ReadCriteoFile(const std::string& path,
                                          int64_t max_samples = 0,
                                          CriteoShard shard = {});

// A Criteo file's samples of one shard, read in file order a few at a time
// (the file is read once, through a 4 MiB buffer): what a worker streams
// each epoch instead of holding its shard (docs/sparse.md, "Data").
// Movable; not thread-safe.
class CriteoStream {
 public:
  // Opens `path` (plain or gzip) for the samples of `shard`, stopping after
  // max_samples samples of the source (0 or negative: all). Errors:
  // INVALID_ARGUMENT for a bad shard; NOT_FOUND naming the path for a
  // missing file.
  static absl::StatusOr<CriteoStream> Open(const std::string& path,
                                           int64_t max_samples = 0,
                                           CriteoShard shard = {});

  CriteoStream(CriteoStream&&) noexcept;
  CriteoStream& operator=(CriteoStream&&) noexcept;
  ~CriteoStream();

  // Replaces out's samples (their vectors' capacity reused) with the
  // shard's next `count` samples, fewer only where the source ends; sets
  // out->source_samples to source_samples(). Errors: as ReadCriteoFile's
  // (a malformed line, named by path and line number; DATA_LOSS for a
  // corrupt gzip stream); out then holds the samples before the error.
  absl::Status Next(int64_t count, CtrDataset* out);

  // Whether the source has no more samples (its end, or max_samples).
  bool done() const;
  // Samples of the source read so far (the other shards' included).
  int64_t source_samples() const;

 private:
  struct State;
  explicit CriteoStream(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace ps

#endif  // PS_COMMON_CRITEO_READER_H_

// The sparse tables of a model file (docs/model-format.md, "Sparse tables"):
// a PSMODEL2 file is a PSMODEL1 file's header and dense data, then a table
// section of row chunks, written and read a chunk at a time so that neither
// side ever holds a whole table.
//
//   chunk       u32 table (index into the header's model.sparse_tables)
//               u32 n (1 .. kMaxRowsPerChunk; n * (8 + 4 * dim) at most
//                 kMaxChunkBytes)
//               n u64 ids, then n * dim float32 values (row i's values at
//                 [i * dim, (i + 1) * dim)), all little-endian
//   end marker  u32 0xFFFFFFFF, u32 0, u64 rows in all chunks; the file ends
//                 right after it
//
// Within a table an id appears at most once; chunks of tables may come in
// any order (psctl export writes them server by server, bucket by bucket).
#ifndef PS_COMMON_MODEL_TABLES_H_
#define PS_COMMON_MODEL_TABLES_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Most rows one chunk holds, and most bytes (ids and values) of one chunk.
inline constexpr uint32_t kMaxRowsPerChunk = 65536;
inline constexpr int64_t kMaxChunkBytes = int64_t{16} << 20;
// The table field of the end marker.
inline constexpr uint32_t kTableSectionEnd = 0xFFFFFFFFu;

// One chunk of rows of one table.
struct TableChunk {
  uint32_t table = 0;
  std::vector<uint64_t> ids;
  std::vector<float> values;  // ids.size() * dim.
};

// Writes a PSMODEL2 file: the head and dense data at Create, then rows as
// they come, then the end marker at Finish. Writes "<path>.tmp" and renames
// it over `path` at Finish (fsync'ed first), so `path` never holds a partial
// file; destroyed before Finish, it removes the temporary file. Not
// thread-safe.
class ModelFileWriter {
 public:
  // `model` holds the dense tensors (with data) and the ModelSpec whose
  // sparse_tables give each table's dim. Errors: INVALID_ARGUMENT for bad
  // tensor data (as WriteModelFile) or a table dim outside 1..1024; an
  // errno-derived status naming the path on I/O failure.
  static absl::StatusOr<std::unique_ptr<ModelFileWriter>> Create(
      const v1::TrainedModel& model, const std::string& path);
  ~ModelFileWriter();

  ModelFileWriter(const ModelFileWriter&) = delete;
  ModelFileWriter& operator=(const ModelFileWriter&) = delete;

  // Appends rows of `table`: values.size() must be ids.size() * dim. The
  // caller writes each id of a table once. Errors: INVALID_ARGUMENT for an
  // unknown table or a wrong size; I/O errors as Create's.
  absl::Status AppendRows(uint32_t table, std::span<const uint64_t> ids,
                          std::span<const float> values);
  // Writes the end marker, flushes, fsyncs and renames. Errors: I/O errors.
  absl::Status Finish();
  // Rows appended so far.
  int64_t rows() const { return rows_; }

 private:
  ModelFileWriter(std::string path, std::vector<int> dims, FILE* file);
  absl::Status Write(const void* data, size_t n);

  const std::string path_;
  const std::string tmp_;
  const std::vector<int> dims_;
  FILE* file_;
  int64_t rows_ = 0;
  bool finished_ = false;
};

// Reads the table section of a PSMODEL2 file a chunk at a time. Not
// thread-safe.
class ModelTableReader {
 public:
  // Opens `path` and reads its header and dense data (model()). Errors as
  // ReadModelFile's; DATA_LOSS for a PSMODEL1 file (no tables) or a table of
  // dim outside 1..1024.
  static absl::StatusOr<std::unique_ptr<ModelTableReader>> Open(
      const std::string& path);
  ~ModelTableReader();

  ModelTableReader(const ModelTableReader&) = delete;
  ModelTableReader& operator=(const ModelTableReader&) = delete;

  // The header and dense tensors.
  const v1::TrainedModel& model() const { return model_; }
  // The next chunk into `chunk`: true, or false at the end marker (after
  // which the file must end). Errors (naming the path): DATA_LOSS for an
  // unknown table, a row count of 0 or past the limits, a chunk past the
  // file's end, an end marker whose count is not the rows read, or bytes
  // after it; I/O errors.
  absl::StatusOr<bool> Next(TableChunk* chunk);

 private:
  ModelTableReader(std::string path, v1::TrainedModel model, FILE* file,
                   int64_t offset, int64_t file_size);

  const std::string path_;
  const v1::TrainedModel model_;
  FILE* file_;
  int64_t offset_;
  const int64_t file_size_;
  int64_t rows_ = 0;
  bool ended_ = false;
};

// Every row of every table of a model file (PSMODEL1: none), in memory, per
// table in file order: for tests and small models. Errors as Next's.
struct ModelTableRows {
  std::vector<uint64_t> ids;
  std::vector<float> values;
};
absl::StatusOr<std::vector<ModelTableRows>> ReadAllModelTables(
    const std::string& path);

// Checks that a model file's header fits a job to be started from it: its
// tensors are the job's (ModelTensors of spec.model(): names and shapes) and
// its sparse tables are the job's (the same count; each the same name and
// dim, in order). Thread-safe. Errors: INVALID_ARGUMENT naming the first
// mismatch ("init_from: ...").
absl::Status CheckModelFitsJob(const v1::TrainedModel& file,
                               const v1::JobSpec& spec);

}  // namespace ps

#endif  // PS_COMMON_MODEL_TABLES_H_

// Model files: a job's trained parameters on disk (docs/model-format.md).
//
//   bytes 0-7    magic "PSMODEL1"
//   bytes 8-11   header length H, uint32 little-endian
//   next H bytes header: the ps.v1.TrainedModel without tensor data (names and
//                shapes kept), in Protobuf's JSON mapping
//   then         each tensor's values, raw little-endian float32, in header
//                order; the file ends right after the last tensor
#ifndef PS_COMMON_MODEL_FILE_H_
#define PS_COMMON_MODEL_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"

namespace ps {

// The first 8 bytes of a model file of dense tensors only.
inline constexpr char kModelFileMagic[] = "PSMODEL1";
// The first 8 bytes of a model file that also holds sparse tables' rows,
// after the dense data (common/model_tables.h).
inline constexpr char kModelFileTablesMagic[] = "PSMODEL2";

// Where the parts of a model file are (ReadModelFile).
struct ModelFileLayout {
  bool has_tables = false;    // PSMODEL2: a table section follows.
  int64_t tables_offset = 0;  // Its first byte: right after the dense data.
  int64_t file_size = 0;
};

// Checks that `model.tensors` are exactly the tensors of
// ModelTensors(model.model): the same count, and each the same name and shape
// with product(shape) float32 values of data. Thread-safe.
// Errors: INVALID_ARGUMENT naming the first mismatch (or the invalid spec).
absl::Status CheckTrainedModel(const v1::TrainedModel& model);

// Writes `model` to `path` in the model file format: first to "<path>.tmp",
// which is flushed to disk and then renamed over `path`, so that `path` never
// holds a partial file. Thread-safe for distinct paths.
// Errors: INVALID_ARGUMENT if a tensor's data is not product(shape) float32
// values; an errno-derived status (for example NOT_FOUND for a missing
// directory, PERMISSION_DENIED) naming the path on I/O failure.
absl::Status WriteModelFile(const v1::TrainedModel& model,
                            const std::string& path);

// The bytes of a model file before its dense data: the magic
// (kModelFileTablesMagic if `with_tables`), the header length and the header
// (`model` without tensor data). Thread-safe. Errors: INVALID_ARGUMENT as
// WriteModelFile's.
absl::StatusOr<std::string> EncodeModelFileHead(const v1::TrainedModel& model,
                                                bool with_tables);

// Reads a model file written by WriteModelFile, or the header and dense
// tensors of one with tables (PSMODEL2; its rows are read with
// ModelTableReader, common/model_tables.h). Checks the file's structure
// (magic, header, data sizes), not that the tensors fit the model spec (see
// CheckTrainedModel). Fills `layout` if not null. Thread-safe.
// Errors (each naming the path): NOT_FOUND for a missing file; DATA_LOSS for a
// bad magic, an unreadable header, a negative or overflowing shape, or a file
// shorter or longer than its header says (with tables: shorter than the
// dense data and an end marker); another errno-derived code for other I/O
// failures.
absl::StatusOr<v1::TrainedModel> ReadModelFile(
    const std::string& path, ModelFileLayout* layout = nullptr);

}  // namespace ps

#endif  // PS_COMMON_MODEL_FILE_H_

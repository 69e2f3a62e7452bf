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

// The first 8 bytes of every model file.
inline constexpr char kModelFileMagic[] = "PSMODEL1";

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

// Reads a model file written by WriteModelFile. Checks the file's structure
// (magic, header, data sizes), not that the tensors fit the model spec (see
// CheckTrainedModel). Thread-safe.
// Errors (each naming the path): NOT_FOUND for a missing file; DATA_LOSS for a
// bad magic, an unreadable header, a negative or overflowing shape, or a file
// shorter or longer than its header says; another errno-derived code for other
// I/O failures.
absl::StatusOr<v1::TrainedModel> ReadModelFile(const std::string& path);

}  // namespace ps

#endif  // PS_COMMON_MODEL_FILE_H_

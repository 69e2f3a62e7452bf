// Reader for libsvm's sparse text format: one sample a line,
// "label index:value index:value ...".
#ifndef PS_COMMON_LIBSVM_READER_H_
#define PS_COMMON_LIBSVM_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/idx_reader.h"

namespace ps {

// How to read a libsvm data set.
struct LibsvmOptions {
  // Values per sample (the model's input_dim): indices run from 1 to dim.
  // Must be >= 1.
  int64_t dim = 0;
  // Keep the first max_samples samples (0 or negative: all).
  int64_t max_samples = 0;
};

// Parses libsvm `text` (named `name` in errors): the label (a decimal
// integer class in [0, 2^31)), then pairs "index:value" separated by spaces
// or tabs, indices strictly increasing within [1, dim], values finite
// decimal floats; absent indices are 0. A '#' starts a comment to the end of
// the line; empty lines are skipped; lines end in \n or \r\n. Thread-safe.
// Errors: INVALID_ARGUMENT "NAME:LINE: ..." naming the line and what was
// wrong (a pair without ':', an index out of range or not increasing, a
// value or label that is not a number, a negative label, NaN or Inf), or
// "NAME: no samples"; for dim < 1, INVALID_ARGUMENT too.
absl::StatusOr<Dataset> ParseLibsvmDataset(absl::string_view text,
                                           absl::string_view name,
                                           const LibsvmOptions& options);

// ReadTextFile(path) (plain or gzip), then ParseLibsvmDataset. Errors: the
// file's (NOT_FOUND naming the path, DATA_LOSS) and the parser's.
absl::StatusOr<Dataset> ReadLibsvmDataset(const std::string& path,
                                          const LibsvmOptions& options);

}  // namespace ps

#endif  // PS_COMMON_LIBSVM_READER_H_

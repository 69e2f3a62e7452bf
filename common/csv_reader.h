// Reader for CSV data sets: one sample a line, the label (an integer class)
// then the sample's values, separated by commas.
#ifndef PS_COMMON_CSV_READER_H_
#define PS_COMMON_CSV_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/idx_reader.h"

namespace ps {

// How to read a CSV data set.
struct CsvOptions {
  // Values per sample (the model's input_dim): every line holds 1 + dim
  // fields. Must be >= 1.
  int64_t dim = 0;
  // The first line is a header and is skipped. Default: no header.
  bool header = false;
  // Keep the first max_samples samples (0 or negative: all).
  int64_t max_samples = 0;
};

// Parses CSV `text` (named `name` in errors). Fields may be surrounded by
// spaces or tabs; lines end in \n or \r\n; empty lines are skipped. The label
// is a decimal integer in [0, 2^31); values are decimal floats
// ("0.5", "-1e-3"), finite. Features are the values as written (no scaling).
// Thread-safe. Errors: INVALID_ARGUMENT "NAME:LINE: ..." naming the line and
// what was wrong (the field count, a field that is not a number, a negative
// or non-integer label, NaN or Inf), or "NAME: no samples" when none; for
// dim < 1, INVALID_ARGUMENT too.
absl::StatusOr<Dataset> ParseCsvDataset(absl::string_view text,
                                        absl::string_view name,
                                        const CsvOptions& options);

// ReadTextFile(path) (plain or gzip), then ParseCsvDataset. Errors: the
// file's (NOT_FOUND naming the path, DATA_LOSS) and the parser's.
absl::StatusOr<Dataset> ReadCsvDataset(const std::string& path,
                                       const CsvOptions& options);

}  // namespace ps

#endif  // PS_COMMON_CSV_READER_H_

// Field parsing shared by the CSV and libsvm readers: lines, labels and
// values, with errors that name the file and the line.
#ifndef PS_COMMON_TEXT_PARSE_H_
#define PS_COMMON_TEXT_PARSE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ps::text_parse {

// Walks `text` line by line (\n or \r\n), counting lines from 1.
class Lines {
 public:
  explicit Lines(absl::string_view text) : rest_(text) {}
  // The next line without its end, or false at the end of the text.
  bool Next(absl::string_view* line);
  // The number of the line Next returned last.
  int64_t number() const { return number_; }

 private:
  absl::string_view rest_;
  int64_t number_ = 0;
};

// `field` without surrounding spaces and tabs.
absl::string_view Trim(absl::string_view field);

// INVALID_ARGUMENT "NAME:LINE: WHAT", with `field` (quoted, at most 32
// bytes, non-printable bytes as '?') appended when not empty.
absl::Status LineError(absl::string_view name, int64_t line,
                       absl::string_view what, absl::string_view field = {});

// Parses a label: a decimal integer in [0, 2^31). Errors: LineError.
absl::Status ParseLabel(absl::string_view field, absl::string_view name,
                        int64_t line, int32_t* out);

// Parses a finite decimal float. Errors: LineError naming `what` (e.g.
// "value 3").
absl::Status ParseValue(absl::string_view field, absl::string_view name,
                        int64_t line, absl::string_view what, float* out);

}  // namespace ps::text_parse

#endif  // PS_COMMON_TEXT_PARSE_H_

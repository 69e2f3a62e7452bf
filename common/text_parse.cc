#include "common/text_parse.h"

#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps::text_parse {

bool Lines::Next(absl::string_view* line) {
  if (rest_.empty()) return false;
  const size_t end = rest_.find('\n');
  *line = rest_.substr(0, end);
  rest_.remove_prefix(end == absl::string_view::npos ? rest_.size() : end + 1);
  if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
  ++number_;
  return true;
}

absl::string_view Trim(absl::string_view field) {
  while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) {
    field.remove_prefix(1);
  }
  while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) {
    field.remove_suffix(1);
  }
  return field;
}

absl::Status LineError(absl::string_view name, int64_t line,
                       absl::string_view what, absl::string_view field) {
  std::string message = absl::StrCat(name, ":", line, ": ", what);
  if (!field.empty()) {
    std::string shown(field.substr(0, 32));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 ||
          static_cast<unsigned char>(c) >= 0x7f) {
        c = '?';
      }
    }
    absl::StrAppend(&message, " (\"", shown, field.size() > 32 ? "..." : "",
                    "\")");
  }
  return absl::InvalidArgumentError(message);
}

absl::Status ParseLabel(absl::string_view field, absl::string_view name,
                        int64_t line, int32_t* out) {
  field = Trim(field);
  if (field.empty()) return LineError(name, line, "the label is missing");
  if (!absl::SimpleAtoi(field, out)) {
    return LineError(name, line, "the label is not an integer", field);
  }
  if (*out < 0) {
    return LineError(name, line,
                     "the label is negative (labels are class indices from 0)",
                     field);
  }
  return absl::OkStatus();
}

absl::Status ParseValue(absl::string_view field, absl::string_view name,
                        int64_t line, absl::string_view what, float* out) {
  field = Trim(field);
  if (field.empty())
    return LineError(name, line, absl::StrCat(what, " is empty"));
  if (!absl::SimpleAtof(field, out)) {
    return LineError(name, line, absl::StrCat(what, " is not a number"), field);
  }
  if (!std::isfinite(*out)) {
    return LineError(name, line,
                     absl::StrCat(what,
                                  " is not finite (NaN, Inf or out of "
                                  "float's range)"),
                     field);
  }
  return absl::OkStatus();
}

}  // namespace ps::text_parse

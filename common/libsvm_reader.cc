#include "common/libsvm_reader.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/text_file.h"
#include "common/text_parse.h"

namespace ps {
namespace {

// Splits off the next token separated by spaces or tabs; false at the end.
bool NextToken(absl::string_view* rest, absl::string_view* token) {
  size_t i = 0;
  while (i < rest->size() && ((*rest)[i] == ' ' || (*rest)[i] == '\t')) ++i;
  rest->remove_prefix(i);
  if (rest->empty()) return false;
  size_t end = 0;
  while (end < rest->size() && (*rest)[end] != ' ' && (*rest)[end] != '\t') {
    ++end;
  }
  *token = rest->substr(0, end);
  rest->remove_prefix(end);
  return true;
}

}  // namespace

absl::StatusOr<Dataset> ParseLibsvmDataset(absl::string_view text,
                                           absl::string_view name,
                                           const LibsvmOptions& options) {
  using namespace text_parse;  // NOLINT: the readers' own helpers.
  if (options.dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": values per sample must be >= 1, got ", options.dim));
  }
  Dataset data;
  data.dim = options.dim;
  Lines lines(text);
  absl::string_view line;
  while ((options.max_samples <= 0 || data.num_samples < options.max_samples) &&
         lines.Next(&line)) {
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    absl::string_view token;
    if (!NextToken(&line, &token)) continue;  // Empty or a comment.
    const int64_t n = lines.number();
    int32_t label = 0;
    if (auto s = ParseLabel(token, name, n, &label); !s.ok()) return s;
    data.labels.push_back(label);
    const size_t row = data.features.size();
    data.features.resize(row + options.dim, 0.0f);
    int64_t last = 0;
    while (NextToken(&line, &token)) {
      const size_t colon = token.find(':');
      if (colon == absl::string_view::npos) {
        return LineError(name, n, "expected index:value", token);
      }
      int64_t index = 0;
      if (!absl::SimpleAtoi(token.substr(0, colon), &index)) {
        return LineError(name, n, "the index is not an integer", token);
      }
      if (index < 1 || index > options.dim) {
        return LineError(
            name, n,
            absl::StrCat("index ", index, " is outside [1, ", options.dim, "]"),
            token);
      }
      if (index <= last) {
        return LineError(name, n,
                         absl::StrCat("index ", index,
                                      " does not increase (after ", last, ")"),
                         token);
      }
      last = index;
      float value = 0;
      if (auto s =
              ParseValue(token.substr(colon + 1), name, n,
                         absl::StrCat("the value of index ", index), &value);
          !s.ok()) {
        return s;
      }
      data.features[row + index - 1] = value;
    }
    ++data.num_samples;
  }
  if (data.num_samples == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no samples"));
  }
  return data;
}

absl::StatusOr<Dataset> ReadLibsvmDataset(const std::string& path,
                                          const LibsvmOptions& options) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseLibsvmDataset(*text, path, options);
}

}  // namespace ps

#include "common/csv_reader.h"

#include "absl/strings/str_cat.h"
#include "common/text_file.h"
#include "common/text_parse.h"

namespace ps {

absl::StatusOr<Dataset> ParseCsvDataset(absl::string_view text,
                                        absl::string_view name,
                                        const CsvOptions& options) {
  using namespace text_parse;  // NOLINT: the readers' own helpers.
  if (options.dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": values per sample must be >= 1, got ", options.dim));
  }
  Dataset data;
  data.dim = options.dim;
  Lines lines(text);
  absl::string_view line;
  if (options.header && !lines.Next(&line)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": no samples (not even the header line)"));
  }
  while ((options.max_samples <= 0 || data.num_samples < options.max_samples) &&
         lines.Next(&line)) {
    if (Trim(line).empty()) continue;
    const int64_t n = lines.number();
    int64_t fields = 0;
    size_t start = 0;
    while (true) {
      const size_t comma = line.find(',', start);
      const absl::string_view field = line.substr(
          start, comma == absl::string_view::npos ? absl::string_view::npos
                                                  : comma - start);
      if (fields == 0) {
        int32_t label = 0;
        if (auto s = ParseLabel(field, name, n, &label); !s.ok()) return s;
        data.labels.push_back(label);
      } else if (fields <= options.dim) {
        float value = 0;
        if (auto s = ParseValue(field, name, n, absl::StrCat("value ", fields),
                                &value);
            !s.ok()) {
          return s;
        }
        data.features.push_back(value);
      }
      ++fields;
      if (comma == absl::string_view::npos) break;
      start = comma + 1;
    }
    if (fields != options.dim + 1) {
      return LineError(
          name, n,
          absl::StrCat("expected ", options.dim + 1, " fields (the label and ",
                       options.dim, " values), got ", fields));
    }
    ++data.num_samples;
  }
  if (data.num_samples == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no samples"));
  }
  return data;
}

absl::StatusOr<Dataset> ReadCsvDataset(const std::string& path,
                                       const CsvOptions& options) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseCsvDataset(*text, path, options);
}

}  // namespace ps

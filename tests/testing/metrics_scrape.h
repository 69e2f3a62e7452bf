// Reading a sample's value out of Prometheus's text format, for tests that
// check what a server exports (its registry serialized as /metrics serves
// it).
#ifndef PS_TESTS_TESTING_METRICS_SCRAPE_H_
#define PS_TESTS_TESTING_METRICS_SCRAPE_H_

#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ps::testing {

// The value of the sample `series` (the metric's name and its labels as the
// text format writes them, e.g. `ps_sparse_rows{table="C1"}`) in a scraped
// `body`, or nullopt when it has none.
inline std::optional<double> MetricValue(absl::string_view body,
                                         absl::string_view series) {
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (absl::StartsWith(line, series) && line.size() > series.size() &&
        line[series.size()] == ' ') {
      return std::strtod(std::string(line.substr(series.size() + 1)).c_str(),
                         nullptr);
    }
  }
  return std::nullopt;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_METRICS_SCRAPE_H_

// The CSV reader (ParseCsvDataset) on hostile text. Byte 0 picks the values per
// sample (1 to 8, bits 0-2), max_samples (bits 3-4; 0: all) and whether a
// header line is skipped (bit 7). The rest is the file's text. A refusal must
// be INVALID_ARGUMENT naming the file; a success must be a consistent data set
// of finite values and non-negative labels.
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/csv_reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t dim = (data[0] & 0x7) + 1;
  const int64_t max_samples = (data[0] >> 3) & 0x3;
  const absl::string_view text(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  auto dataset = ps::ParseCsvDataset(text, "fuzz.txt",
                                     {.dim = dim,
                                      .header = (data[0] & 0x80) != 0,
                                      .max_samples = max_samples});
  if (!dataset.ok()) {
    PS_FUZZ_REQUIRE(
        dataset.status().code() == absl::StatusCode::kInvalidArgument,
        dataset.status().ToString());
    PS_FUZZ_REQUIRE(absl::StartsWith(dataset.status().message(), "fuzz.txt"),
                    dataset.status().ToString());
    PS_FUZZ_REQUIRE(dataset.status().message().size() < 512,
                    dataset.status().ToString());
    return 0;
  }
  PS_FUZZ_REQUIRE(dataset->dim == dim, std::to_string(dataset->dim));
  PS_FUZZ_REQUIRE(dataset->num_samples >= 1, "no samples");
  PS_FUZZ_REQUIRE(max_samples == 0 || dataset->num_samples <= max_samples,
                  std::to_string(dataset->num_samples));
  PS_FUZZ_REQUIRE(static_cast<int64_t>(dataset->features.size()) ==
                      dataset->num_samples * dim,
                  "features");
  PS_FUZZ_REQUIRE(
      static_cast<int64_t>(dataset->labels.size()) == dataset->num_samples,
      "labels");
  for (float f : dataset->features) {
    PS_FUZZ_REQUIRE(std::isfinite(f), std::to_string(f));
  }
  for (int32_t label : dataset->labels) {
    PS_FUZZ_REQUIRE(label >= 0, std::to_string(label));
  }
  return 0;
}

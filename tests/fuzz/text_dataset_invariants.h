// What the text readers (CSV and libsvm) must give for any input, checked by
// fuzz_csv_reader and fuzz_libsvm_reader: a refusal is INVALID_ARGUMENT
// naming the file, in a short message; a success is a consistent data set of
// finite values and non-negative labels.
#ifndef PS_TESTS_FUZZ_TEXT_DATASET_INVARIANTS_H_
#define PS_TESTS_FUZZ_TEXT_DATASET_INVARIANTS_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/idx_reader.h"
#include "tests/fuzz/fuzz_util.h"

namespace ps::fuzz {

// The file name the targets parse their input as.
inline constexpr char kTextFile[] = "fuzz.txt";

// Aborts unless `dataset`, read from kTextFile with `dim` values per sample
// and at most `max_samples` samples (0: all), keeps the invariants above.
inline void RequireTextDatasetInvariants(const absl::StatusOr<Dataset>& dataset,
                                         int64_t dim, int64_t max_samples) {
  if (!dataset.ok()) {
    PS_FUZZ_REQUIRE(
        dataset.status().code() == absl::StatusCode::kInvalidArgument,
        dataset.status().ToString());
    PS_FUZZ_REQUIRE(absl::StartsWith(dataset.status().message(), kTextFile),
                    dataset.status().ToString());
    PS_FUZZ_REQUIRE(dataset.status().message().size() < 512,
                    dataset.status().ToString());
    return;
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
}

}  // namespace ps::fuzz

#endif  // PS_TESTS_FUZZ_TEXT_DATASET_INVARIANTS_H_

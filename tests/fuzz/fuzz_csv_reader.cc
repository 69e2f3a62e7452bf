// The CSV reader (ParseCsvDataset) on hostile text. Byte 0 picks the values per
// sample (1 to 8, bits 0-2), max_samples (bits 3-4; 0: all) and whether a
// header line is skipped (bit 7). The rest is the file's text. The result must
// keep RequireTextDatasetInvariants.
#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/csv_reader.h"
#include "tests/fuzz/text_dataset_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t dim = (data[0] & 0x7) + 1;
  const int64_t max_samples = (data[0] >> 3) & 0x3;
  const absl::string_view text(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  ps::fuzz::RequireTextDatasetInvariants(
      ps::ParseCsvDataset(text, ps::fuzz::kTextFile,
                          {.dim = dim,
                           .header = (data[0] & 0x80) != 0,
                           .max_samples = max_samples}),
      dim, max_samples);
  return 0;
}

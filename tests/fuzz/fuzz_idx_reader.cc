// The IDX reader (ReadIdxDataset) on hostile files: an images file and a
// labels file, plain or gzip-compressed, cut from one input. Byte 0 picks
// max_samples, bytes 1-2 (little-endian) where the images file ends.
#include <cstdint>
#include <string>

#include "common/idx_reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int64_t max_samples = data[0] % 4;  // 0: all.
  size_t split = data[1] | (size_t{data[2]} << 8);
  const char* rest = reinterpret_cast<const char*>(data + 3);
  const size_t rest_size = size - 3;
  if (split > rest_size) split = rest_size;
  const std::string images = ps::fuzz::WriteScratch("images", rest, split);
  const std::string labels =
      ps::fuzz::WriteScratch("labels", rest + split, rest_size - split);
  auto dataset = ps::ReadIdxDataset(images, labels, max_samples);
  if (!dataset.ok()) {
    const absl::StatusCode code = dataset.status().code();
    PS_FUZZ_REQUIRE(code == absl::StatusCode::kInvalidArgument ||
                        code == absl::StatusCode::kDataLoss,
                    dataset.status().ToString());
    return 0;
  }
  PS_FUZZ_REQUIRE(dataset->dim >= 1, std::to_string(dataset->dim));
  PS_FUZZ_REQUIRE(max_samples == 0 || dataset->num_samples <= max_samples,
                  std::to_string(dataset->num_samples));
  PS_FUZZ_REQUIRE(static_cast<int64_t>(dataset->features.size()) ==
                      dataset->num_samples * dataset->dim,
                  "features");
  PS_FUZZ_REQUIRE(
      static_cast<int64_t>(dataset->labels.size()) == dataset->num_samples,
      "labels");
  for (float f : dataset->features) {
    PS_FUZZ_REQUIRE(f >= 0.0f && f <= 1.0f, std::to_string(f));
  }
  return 0;
}

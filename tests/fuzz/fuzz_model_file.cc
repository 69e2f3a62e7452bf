// Model files (psctl eval reads them; anyone may hand one over): the reader
// on hostile bytes, the check against the model spec, and, for a file that
// reads, a write and read back that must give the same model.
#include <cstdint>
#include <string>

#include "common/model_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ps::fuzz::WriteScratch(
      "model.bin", reinterpret_cast<const char*>(data), size);
  auto model = ps::ReadModelFile(path);
  if (!model.ok()) {
    PS_FUZZ_REQUIRE(model.status().code() == absl::StatusCode::kDataLoss,
                    model.status().ToString());
    return 0;
  }
  const absl::Status fits = ps::CheckTrainedModel(*model);
  if (!fits.ok()) {
    PS_FUZZ_REQUIRE(fits.code() == absl::StatusCode::kInvalidArgument,
                    fits.ToString());
  }
  const std::string copy = ps::fuzz::ScratchDir() + "/copy.bin";
  const absl::Status written = ps::WriteModelFile(*model, copy);
  PS_FUZZ_REQUIRE(written.ok(), written.ToString());
  auto again = ps::ReadModelFile(copy);
  PS_FUZZ_REQUIRE(again.ok(), again.status().ToString());
  PS_FUZZ_REQUIRE(again->SerializeAsString() == model->SerializeAsString(),
                  "the model changed on a write and read back");
  return 0;
}

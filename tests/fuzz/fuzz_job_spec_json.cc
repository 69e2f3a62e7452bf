// A job spec in JSON, as psctl reads it from a file: parsing, defaults,
// validation and the coordinator's admission (fuzz_util.h CheckSpec).
#include <cstdint>
#include <string>

#include "common/job_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto spec = ps::JobSpecFromJson(
      std::string(reinterpret_cast<const char*>(data), size));
  if (!spec.ok()) {
    PS_FUZZ_REQUIRE(spec.status().code() == absl::StatusCode::kInvalidArgument,
                    spec.status().ToString());
    return 0;
  }
  ps::fuzz::CheckSpec(*std::move(spec));
  return 0;
}

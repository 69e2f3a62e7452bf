// A job spec in Protobuf's binary form, as SubmitJob receives it (and as
// servers receive it inside an Assignment): decoding, defaults, validation
// and the coordinator's admission (fuzz_util.h CheckSpec).
#include <cstdint>

#include "ps/v1/job_service.pb.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ps::v1::SubmitJobRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  ps::fuzz::CheckSpec(request.spec());
  return 0;
}

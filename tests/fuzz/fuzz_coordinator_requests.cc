// Every request the coordinator takes, decoded from bytes and validated as
// its JobManager does before acting (coordinator/request_validation.h): the
// first byte picks the request type, the rest is the message.
#include <cstdint>

#include "common/job_spec.h"
#include "common/model_file.h"
#include "coordinator/request_validation.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job_service.pb.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using ps::fuzz::RequireFieldError;

template <typename Message>
bool Parse(const uint8_t* data, size_t size, Message* message) {
  return message->ParseFromArray(data, static_cast<int>(size));
}

// A validator's verdict: OK, or an error naming the field.
void Check(const absl::Status& status) {
  if (!status.ok()) RequireFieldError(status);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t kind = data[0];
  ++data;
  --size;
  switch (kind % 9) {
    case 0: {
      ps::v1::RegisterRequest r;
      if (Parse(data, size, &r)) Check(ps::ValidateRegisterRequest(r));
      break;
    }
    case 1: {
      ps::v1::HeartbeatRequest r;
      if (Parse(data, size, &r)) Check(ps::ValidateHeartbeatRequest(r));
      break;
    }
    case 2: {
      ps::v1::ProgressReport r;
      if (Parse(data, size, &r)) Check(ps::ValidateProgressReport(r));
      break;
    }
    case 3: {
      ps::v1::UploadModelRequest r;
      if (!Parse(data, size, &r)) break;
      const absl::Status valid = ps::ValidateUploadModelRequest(r);
      Check(valid);
      // The manager then compares the tensors with the job's model.
      if (valid.ok()) {
        const absl::Status fits = ps::CheckTrainedModel(r.model());
        if (!fits.ok()) {
          PS_FUZZ_REQUIRE(fits.code() == absl::StatusCode::kInvalidArgument,
                          fits.ToString());
          PS_FUZZ_REQUIRE(fits.message().size() < 4096, fits.ToString());
        }
      }
      break;
    }
    case 4: {
      ps::v1::GetJobRequest r;
      if (Parse(data, size, &r)) Check(ps::ValidateId("job_id", r.job_id()));
      break;
    }
    case 5: {
      ps::v1::CancelJobRequest r;
      if (Parse(data, size, &r)) Check(ps::ValidateId("job_id", r.job_id()));
      break;
    }
    case 6: {
      ps::v1::WatchJobRequest r;
      if (Parse(data, size, &r)) Check(ps::ValidateId("job_id", r.job_id()));
      break;
    }
    case 7: {
      ps::v1::ExportModelRequest r;
      if (Parse(data, size, &r)) Check(ps::ValidateId("job_id", r.job_id()));
      break;
    }
    case 8: {
      ps::v1::SubmitJobRequest r;
      if (Parse(data, size, &r)) ps::fuzz::CheckSpec(r.spec());
      break;
    }
  }
  return 0;
}

// Checks of the coordinator's incoming requests before anything acts on them:
// identities (ValidateId in common/job_spec.h), sizes and ranges, each refusal
// naming the field. Pure functions
// of the request (no state, no gRPC), so that the fuzz targets run them too.
#ifndef PS_COORDINATOR_REQUEST_VALIDATION_H_
#define PS_COORDINATOR_REQUEST_VALIDATION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "ps/v1/cluster.pb.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Longest server address (host:port).
inline constexpr size_t kMaxAddressBytes = 255;
// Most held assignments a node may report when it registers or heartbeats (a
// server reports every job whose shards it stores).
inline constexpr int kMaxHeldAssignments = 1024;
// Longest error a worker may report; the coordinator keeps it in the job's
// status.
inline constexpr size_t kMaxReportedErrorBytes = 16 * 1024;
// Most tensors in an uploaded model, longest tensor name, most dimensions:
// kMaxModelTensors, kMaxTensorNameBytes and kMaxTensorRank
// (common/model_layout.h), the limits of an EXTERNAL model's tensors too.

// What the coordinator admits (docs/security.md).
struct JobLimits {
  // Jobs PENDING or RUNNING at once; a SubmitJob beyond is refused with
  // RESOURCE_EXHAUSTED. Default 100.
  int max_jobs = 100;
  // Largest model (float32 parameters) one job may train; a larger one is
  // refused with RESOURCE_EXHAUSTED. Default 200 MiB: worker 0 uploads the
  // trained model to the coordinator in one message, and psctl exports it in
  // one.
  int64_t max_model_bytes = int64_t{200} << 20;
};

// Largest serialized request each coordinator method accepts; a larger one
// is refused with RESOURCE_EXHAUSTED before it is parsed (FinishRawUnary,
// docs/security.md). SubmitJob carries a job spec (a few hundred bytes);
// the other JobService and ClusterService methods carry ids, a progress
// report (its error at most kMaxReportedErrorBytes) or a few held
// assignments. Only UploadModel carries tensors
// (MaxUploadModelRequestBytes).
inline constexpr size_t kMaxSubmitJobRequestBytes = 1 << 20;
inline constexpr size_t kMaxSmallRequestBytes = 64 << 10;
// Bytes of an UploadModelRequest beyond its tensors' values: ids, tensor
// names and shapes (at most kMaxModelTensors of them), framing.
inline constexpr int64_t kUploadModelEnvelopeBytes = 4 << 20;

// Largest UploadModelRequest a coordinator admitting `limits` accepts: the
// largest model's values plus kUploadModelEnvelopeBytes, at most INT_MAX
// (gRPC's limits are ints).
int64_t MaxUploadModelRequestBytes(const JobLimits& limits);

// A job spec as submitted, after ApplyJobSpecDefaults: ValidateJobSpec, no
// unknown fields anywhere (INVALID_ARGUMENT naming where: a newer client's
// option, or a field of the wrong wire type, would otherwise be stored and
// sent to every node), then the model's size against limits.max_model_bytes
// (RESOURCE_EXHAUSTED naming "model").
absl::Status ValidateSubmittedSpec(const v1::JobSpec& spec,
                                   const JobLimits& limits);

// ClusterService requests. INVALID_ARGUMENT naming the field.
absl::Status ValidateRegisterRequest(const v1::RegisterRequest& request);
absl::Status ValidateHeartbeatRequest(const v1::HeartbeatRequest& request);
absl::Status ValidateProgressReport(const v1::ProgressReport& report);
absl::Status ValidateUploadModelRequest(const v1::UploadModelRequest& request);

}  // namespace ps

#endif  // PS_COORDINATOR_REQUEST_VALIDATION_H_

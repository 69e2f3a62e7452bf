#include "coordinator/request_validation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"

namespace ps {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// host:port with a printable host and a port in [1, 65535].
absl::Status ValidateAddress(absl::string_view field,
                             absl::string_view address) {
  if (address.size() > kMaxAddressBytes) {
    return Invalid(field,
                   absl::StrCat("longer than ", kMaxAddressBytes, " bytes"));
  }
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return Invalid(field, "must be host:port with a port in [1, 65535]");
  }
  for (char c : address.substr(0, colon)) {
    if (c <= ' ' || c > '~') {
      return Invalid(field,
                     "the host holds a character that is not printable "
                     "ASCII");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateIndex(absl::string_view field, int64_t index) {
  if (index < 0 || index >= kMaxNodesPerJob) {
    return Invalid(
        field, absl::StrCat(index, " is not in [0, ", kMaxNodesPerJob, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateNonNegative(absl::string_view field, int64_t value) {
  if (value < 0) return Invalid(field, "must be >= 0");
  return absl::OkStatus();
}

// -1 (or any negative value: not measured) or a fraction in [0, 1].
absl::Status ValidateAccuracy(absl::string_view field, float accuracy) {
  if (std::isnan(accuracy) || accuracy > 1) {
    return Invalid(field, "must be in [0, 1], or -1 when not measured");
  }
  return absl::OkStatus();
}

// A CTR model's test AUC and log loss: NaN, an AUC above 1 and an infinite
// log loss are refused; a negative value means not measured.
absl::Status ValidateBinaryMetrics(const std::string& prefix, float auc,
                                   float log_loss) {
  if (std::isnan(auc) || auc > 1) {
    return Invalid(prefix + "test_auc",
                   "must be in [0, 1], or -1 when not measured");
  }
  if (std::isnan(log_loss) || std::isinf(log_loss)) {
    return Invalid(prefix + "test_log_loss",
                   "must be finite and >= 0, or -1 when not measured");
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT naming the first field `message` (at `path`) holds that
// its type does not define: an option of a newer client, or a field sent
// with the wrong wire type. They would be stored and sent to every node.
absl::Status CheckNoUnknownFields(const google::protobuf::Message& message,
                                  const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown =
      reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return Invalid(
        path.empty() ? "spec" : path,
        absl::StrCat("unknown field number ", unknown.field(0).number(),
                     " (or a known one of the wrong type)"));
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() !=
        google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      continue;
    }
    const std::string sub =
        path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        PS_RETURN_IF_ERROR(CheckNoUnknownFields(
            reflection->GetRepeatedMessage(message, field, i),
            absl::StrCat(sub, "[", i, "]")));
      }
    } else
      PS_RETURN_IF_ERROR(
          CheckNoUnknownFields(reflection->GetMessage(message, field), sub));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t MaxUploadModelRequestBytes(const JobLimits& limits) {
  return std::clamp<int64_t>(limits.max_model_bytes + kUploadModelEnvelopeBytes,
                             kUploadModelEnvelopeBytes,
                             std::numeric_limits<int>::max());
}

absl::Status ValidateSubmittedSpec(const v1::JobSpec& spec,
                                   const JobLimits& limits) {
  // The model's size first: a model too large for this coordinator is
  // refused as such, not as a block size that yields too many blocks.
  // A model without tensors is left to ValidateJobSpec, whose message names
  // the first field at fault.
  if (spec.has_model()) {
    auto tensors = ModelTensors(spec.model());
    const int64_t bytes = tensors.ok() ? ModelBytes(*tensors) : 0;
    if (bytes > limits.max_model_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("model: ", bytes,
                       " bytes of parameters, more than the "
                       "coordinator's limit of ",
                       limits.max_model_bytes, " (--max_model_bytes)"));
    }
  }
  PS_RETURN_IF_ERROR(ValidateJobSpec(spec));
  return CheckNoUnknownFields(spec, "");
}

namespace {

// The held assignments of a Register or Heartbeat: at most
// kMaxHeldAssignments, each with a valid job id and index.
absl::Status ValidateHeld(
    const google::protobuf::RepeatedPtrField<v1::HeldAssignment>& held) {
  if (held.size() > kMaxHeldAssignments) {
    return Invalid("held", absl::StrCat("more than ", kMaxHeldAssignments,
                                        " assignments"));
  }
  for (int i = 0; i < held.size(); ++i) {
    PS_RETURN_IF_ERROR(
        ValidateId(absl::StrCat("held[", i, "].job_id"), held[i].job_id()));
    PS_RETURN_IF_ERROR(
        ValidateIndex(absl::StrCat("held[", i, "].index"), held[i].index()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRegisterRequest(const v1::RegisterRequest& request) {
  if (request.role() != v1::SERVER && request.role() != v1::WORKER) {
    return Invalid("role", "must be SERVER or WORKER");
  }
  if (request.role() == v1::SERVER) {
    if (request.address().empty()) {
      return Invalid("address", "required for a server");
    }
    PS_RETURN_IF_ERROR(ValidateAddress("address", request.address()));
  } else if (!request.address().empty()) {
    PS_RETURN_IF_ERROR(ValidateAddress("address", request.address()));
  }
  PS_RETURN_IF_ERROR(ValidateHeld(request.held()));
  if (!request.storage_id().empty()) {
    PS_RETURN_IF_ERROR(ValidateId("storage_id", request.storage_id()));
  }
  if (!request.model_digest().empty()) {
    if (request.role() != v1::WORKER) {
      return Invalid("model_digest", "only workers train a model");
    }
    // "fnv1a64:" and 16 lower-case hex digits (ModelDigest).
    const absl::string_view digest = request.model_digest();
    constexpr absl::string_view kPrefix = "fnv1a64:";
    bool valid = digest.size() == kPrefix.size() + 16 &&
                 digest.substr(0, kPrefix.size()) == kPrefix;
    for (size_t i = kPrefix.size(); valid && i < digest.size(); ++i) {
      const char c = digest[i];
      valid = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    }
    if (!valid) {
      return Invalid("model_digest",
                     "must be \"fnv1a64:\" and 16 lower-case hex digits");
    }
  }
  if (!request.job_id().empty()) {
    if (request.role() != v1::WORKER) {
      return Invalid("job_id", "only a worker is started for one job");
    }
    if (auto s = ValidateId("job_id", request.job_id()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateHeartbeatRequest(const v1::HeartbeatRequest& request) {
  PS_RETURN_IF_ERROR(ValidateId("node_id", request.node_id()));
  return ValidateHeld(request.held());
}

absl::Status ValidateProgressReport(const v1::ProgressReport& report) {
  PS_RETURN_IF_ERROR(ValidateId("node_id", report.node_id()));
  PS_RETURN_IF_ERROR(ValidateId("job_id", report.job_id()));
  PS_RETURN_IF_ERROR(ValidateIndex("worker_index", report.worker_index()));
  PS_RETURN_IF_ERROR(ValidateNonNegative("epoch", report.epoch()));
  PS_RETURN_IF_ERROR(ValidateNonNegative("clock", report.clock()));
  PS_RETURN_IF_ERROR(
      ValidateNonNegative("total_clocks", report.total_clocks()));
  if (!(report.samples_per_second() >= 0) ||
      !std::isfinite(report.samples_per_second())) {
    return Invalid("samples_per_second", "must be finite and >= 0");
  }
  PS_RETURN_IF_ERROR(ValidateAccuracy("test_accuracy", report.test_accuracy()));
  PS_RETURN_IF_ERROR(
      ValidateBinaryMetrics("", report.test_auc(), report.test_log_loss()));
  if (report.error().size() > kMaxReportedErrorBytes) {
    return Invalid("error", absl::StrCat("longer than ", kMaxReportedErrorBytes,
                                         " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateUploadModelRequest(const v1::UploadModelRequest& request) {
  PS_RETURN_IF_ERROR(ValidateId("node_id", request.node_id()));
  PS_RETURN_IF_ERROR(ValidateIndex("worker_index", request.worker_index()));
  const v1::TrainedModel& model = request.model();
  PS_RETURN_IF_ERROR(ValidateId("model.job_id", model.job_id()));
  PS_RETURN_IF_ERROR(ValidateNonNegative("model.clock", model.clock()));
  PS_RETURN_IF_ERROR(
      ValidateAccuracy("model.test_accuracy", model.test_accuracy()));
  PS_RETURN_IF_ERROR(
      ValidateBinaryMetrics("model.", model.test_auc(), model.test_log_loss()));
  PS_RETURN_IF_ERROR(
      ValidateNonNegative("model.test_samples", model.test_samples()));
  if (model.tensors_size() > kMaxModelTensors) {
    return Invalid("model.tensors",
                   absl::StrCat("more than ", kMaxModelTensors, " tensors"));
  }
  // Names and shapes are compared with the job's (CheckTrainedModel), whose
  // messages quote them: keep them short.
  for (int i = 0; i < model.tensors_size(); ++i) {
    const v1::Tensor& t = model.tensors(i);
    if (t.name().size() > kMaxTensorNameBytes) {
      return Invalid(
          absl::StrCat("model.tensors[", i, "].name"),
          absl::StrCat("longer than ", kMaxTensorNameBytes, " bytes"));
    }
    if (t.shape_size() > kMaxTensorRank) {
      return Invalid(absl::StrCat("model.tensors[", i, "].shape"),
                     absl::StrCat("more than ", kMaxTensorRank, " dimensions"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps

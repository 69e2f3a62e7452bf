// Structured details of an error, carried with it instead of in its message:
// an absl::Status payload in the process, and, across gRPC, the
// grpc-status-details-bin trailer (grpc::Status::error_details) holding a
// google.rpc.Status-compatible message (ps.v1.RpcStatusDetails) whose
// details are the payloads. ToGrpcStatus and FromGrpcStatus
// (common/grpc_util.h) carry them; a caller reads a detail with the typed
// accessors below and never parses a message.
#ifndef PS_COMMON_STATUS_DETAILS_H_
#define PS_COMMON_STATUS_DETAILS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ps/v1/parameter.pb.h"

namespace ps {

// The payload type URL of a MapVersionRefusal.
inline constexpr absl::string_view kMapVersionRefusalUrl =
    "type.googleapis.com/ps.v1.MapVersionRefusal";

// `status` with `refusal` attached as its payload. Thread-safe.
absl::Status WithMapVersionRefusal(absl::Status status,
                                   const v1::MapVersionRefusal& refusal);

// The MapVersionRefusal attached to `status`; nullopt if none (or it does
// not parse). Thread-safe.
std::optional<v1::MapVersionRefusal> MapVersionRefusalOf(
    const absl::Status& status);

// A status of `from`'s code with `message`, keeping `from`'s payloads (an
// error wrapped with context keeps its details). Thread-safe.
absl::Status Rewrapped(const absl::Status& from, absl::string_view message);

// The bytes of grpc-status-details-bin for `status`: a serialized
// ps.v1.RpcStatusDetails (google.rpc.Status on the wire) with every payload;
// empty when `status` has none. Thread-safe.
std::string EncodeStatusDetails(const absl::Status& status);

// Attaches to `status` the payloads that `details` (grpc-status-details-bin
// bytes) holds; `status` unchanged if they are empty or do not parse.
// Thread-safe.
void DecodeStatusDetails(absl::string_view details, absl::Status* status);

}  // namespace ps

#endif  // PS_COMMON_STATUS_DETAILS_H_

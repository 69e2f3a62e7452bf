// Protobuf field numbers and tags of ps.v1's PushRequest, PullResponse,
// Block and SparseRows, shared by the parameter wire's encoder and decoder
// (parameter_wire_encode.cc, parameter_wire_decode.cc); included by nothing
// else.
#ifndef PS_COMMON_PARAMETER_WIRE_FIELDS_H_
#define PS_COMMON_PARAMETER_WIRE_FIELDS_H_

#include <cstdint>

#include "google/protobuf/wire_format_lite.h"
#include "ps/v1/parameter.pb.h"

namespace ps {

using WireFormatLite = google::protobuf::internal::WireFormatLite;

// Field numbers of proto/ps/v1/parameter.proto.
constexpr int kJobIdField = v1::PushRequest::kJobIdFieldNumber;
constexpr int kWorkerIndexField = v1::PushRequest::kWorkerIndexFieldNumber;
constexpr int kClockField = v1::PushRequest::kClockFieldNumber;
constexpr int kMapVersionField = v1::PushRequest::kMapVersionFieldNumber;
constexpr int kGradientsField = v1::PushRequest::kGradientsFieldNumber;
constexpr int kGradientEncodingField =
    v1::PushRequest::kGradientEncodingFieldNumber;
constexpr int kBlocksField = v1::PullResponse::kBlocksFieldNumber;
constexpr int kMinClockField = v1::PullResponse::kMinClockFieldNumber;
constexpr int kWorkerClocksField = v1::PullResponse::kWorkerClocksFieldNumber;
constexpr int kPushSparseField = v1::PushRequest::kSparseFieldNumber;
constexpr int kMembershipVersionField =
    v1::PushRequest::kMembershipVersionFieldNumber;
constexpr int kPlaceField = v1::PushRequest::kPlaceFieldNumber;
constexpr int kPullSparseField = v1::PullResponse::kSparseFieldNumber;
constexpr int kValueEncodingField = v1::PullResponse::kValueEncodingFieldNumber;
constexpr int kSparseTableField = v1::SparseRows::kTableFieldNumber;
constexpr int kSparseKeysField = v1::SparseRows::kKeysFieldNumber;
constexpr int kSparseValuesField = v1::SparseRows::kValuesFieldNumber;
constexpr int kKeyField = v1::Block::kKeyFieldNumber;
constexpr int kDataField = v1::Block::kDataFieldNumber;

// The tag of field `field` with wire type `type`.
constexpr uint32_t Tag(int field, WireFormatLite::WireType type) {
  return (static_cast<uint32_t>(field) << 3) | type;
}

}  // namespace ps

#endif  // PS_COMMON_PARAMETER_WIRE_FIELDS_H_

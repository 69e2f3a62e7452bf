#include "common/status_details.h"

#include "absl/strings/cord.h"

namespace ps {

absl::Status WithMapVersionRefusal(absl::Status status,
                                   const v1::MapVersionRefusal& refusal) {
  status.SetPayload(kMapVersionRefusalUrl,
                    absl::Cord(refusal.SerializeAsString()));
  return status;
}

std::optional<v1::MapVersionRefusal> MapVersionRefusalOf(
    const absl::Status& status) {
  auto payload = status.GetPayload(kMapVersionRefusalUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::MapVersionRefusal refusal;
  if (!refusal.ParseFromString(std::string(*payload))) return std::nullopt;
  return refusal;
}

absl::Status Rewrapped(const absl::Status& from, absl::string_view message) {
  absl::Status to(from.code(), message);
  from.ForEachPayload([&to](absl::string_view url, const absl::Cord& payload) {
    to.SetPayload(url, payload);
  });
  return to;
}

std::string EncodeStatusDetails(const absl::Status& status) {
  v1::RpcStatusDetails details;
  status.ForEachPayload(
      [&details](absl::string_view url, const absl::Cord& payload) {
        v1::RpcStatusAny* any = details.add_details();
        any->set_type_url(std::string(url));
        any->set_value(std::string(payload));
      });
  if (details.details().empty()) return std::string();
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(std::string(status.message()));
  return details.SerializeAsString();
}

void DecodeStatusDetails(absl::string_view bytes, absl::Status* status) {
  if (bytes.empty() || status->ok()) return;
  v1::RpcStatusDetails details;
  if (!details.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return;
  }
  for (const v1::RpcStatusAny& any : details.details()) {
    if (any.type_url().empty()) continue;
    status->SetPayload(any.type_url(), absl::Cord(any.value()));
  }
}

}  // namespace ps

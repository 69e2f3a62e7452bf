#include "coordinator/sweep/sweep_params.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// The fields `path` walks through from JobSpec, the last one the leaf.
absl::StatusOr<std::vector<const FieldDescriptor*>> Walk(
    absl::string_view field, absl::string_view path) {
  if (path.empty()) return Invalid(field, "must name a field of the job spec");
  if (path.size() > 256) return Invalid(field, "longer than 256 bytes");
  std::vector<const FieldDescriptor*> fields;
  const Descriptor* message = v1::JobSpec::descriptor();
  for (absl::string_view name : absl::StrSplit(path, '.')) {
    if (message == nullptr) {
      return Invalid(field, absl::StrCat("\"", fields.back()->name(),
                                         "\" is not a message, so \"", path,
                                         "\" names no field of ps.v1.JobSpec"));
    }
    const FieldDescriptor* f = message->FindFieldByName(std::string(name));
    if (f == nullptr) {
      return Invalid(
          field, absl::StrCat("unknown field \"", name, "\" in ",
                              message->full_name(), " (path \"", path, "\")"));
    }
    if (f->is_repeated()) {
      return Invalid(field, absl::StrCat("\"", path, "\": ", f->full_name(),
                                         " is a repeated field; only singular "
                                         "fields can be swept"));
    }
    fields.push_back(f);
    message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE
                  ? f->message_type()
                  : nullptr;
  }
  return fields;
}

SweepFieldKind KindOf(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return SweepFieldKind::kReal;
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return SweepFieldKind::kInteger;
    case FieldDescriptor::CPPTYPE_BOOL:
      return SweepFieldKind::kBool;
    case FieldDescriptor::CPPTYPE_ENUM:
      return SweepFieldKind::kEnum;
    case FieldDescriptor::CPPTYPE_STRING:
      return SweepFieldKind::kString;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return SweepFieldKind::kMessage;
  }
  return SweepFieldKind::kString;
}

// Checks that `v` is integral and within [lo, hi].
absl::Status CheckInteger(absl::string_view field, absl::string_view path,
                          double v, double lo, double hi) {
  if (!std::isfinite(v) || v != std::floor(v)) {
    return Invalid(
        field, absl::StrFormat("\"%s\" is an integer field, got %g", path, v));
  }
  if (v < lo || v > hi) {
    return Invalid(field, absl::StrFormat("\"%s\": %g is out of the field's "
                                          "range [%g, %g]",
                                          path, v, lo, hi));
  }
  return absl::OkStatus();
}

absl::Status SetNumber(absl::string_view field, absl::string_view path,
                       const FieldDescriptor* f, double v, Message* m) {
  const Reflection* r = m->GetReflection();
  if (!std::isfinite(v)) {
    return Invalid(field, absl::StrFormat("\"%s\": %g is not finite", path, v));
  }
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_FLOAT:
      if (std::fabs(v) > std::numeric_limits<float>::max()) {
        return Invalid(
            field, absl::StrFormat("\"%s\": %g does not fit a float", path, v));
      }
      r->SetFloat(m, f, static_cast<float>(v));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_DOUBLE:
      r->SetDouble(m, f, v);
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_INT32:
      if (auto s = CheckInteger(field, path, v, -2147483648.0, 2147483647.0);
          !s.ok()) {
        return s;
      }
      r->SetInt32(m, f, static_cast<int32_t>(v));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_UINT32:
      if (auto s = CheckInteger(field, path, v, 0, 4294967295.0); !s.ok()) {
        return s;
      }
      r->SetUInt32(m, f, static_cast<uint32_t>(v));
      return absl::OkStatus();
    // 2^53: every integer a double holds exactly.
    case FieldDescriptor::CPPTYPE_INT64:
      if (auto s = CheckInteger(field, path, v, -9007199254740992.0,
                                9007199254740992.0);
          !s.ok()) {
        return s;
      }
      r->SetInt64(m, f, static_cast<int64_t>(v));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_UINT64:
      if (auto s = CheckInteger(field, path, v, 0, 9007199254740992.0);
          !s.ok()) {
        return s;
      }
      r->SetUInt64(m, f, static_cast<uint64_t>(v));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_BOOL:
      if (v != 0 && v != 1) {
        return Invalid(
            field,
            absl::StrFormat("\"%s\" is a bool field: 0 or 1, got %g", path, v));
      }
      r->SetBool(m, f, v == 1);
      return absl::OkStatus();
    default:
      return Invalid(field, absl::StrCat("\"", path,
                                         "\" takes a text (choices), "
                                         "not a number"));
  }
}

absl::Status SetText(absl::string_view field, absl::string_view path,
                     const FieldDescriptor* f, const std::string& text,
                     Message* m) {
  const Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(m, f, text);
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* value = f->enum_type()->FindValueByName(text);
      if (value == nullptr) {
        return Invalid(field, absl::StrCat("\"", path, "\": \"", text,
                                           "\" is not a value of ",
                                           f->enum_type()->full_name()));
      }
      r->SetEnum(m, f, value);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* sub = r->MutableMessage(m, f);
      sub->Clear();
      google::protobuf::util::JsonParseOptions options;
      options.ignore_unknown_fields = false;
      auto status =
          google::protobuf::util::JsonStringToMessage(text, sub, options);
      if (!status.ok()) {
        return Invalid(field,
                       absl::StrCat("\"", path, "\": not valid JSON for ",
                                    f->message_type()->full_name(), ": ",
                                    std::string(status.message())));
      }
      return absl::OkStatus();
    }
    default:
      return Invalid(field, absl::StrCat("\"", path,
                                         "\" takes a number (values or "
                                         "range), not a text"));
  }
}

}  // namespace

absl::StatusOr<SweepFieldKind> ResolveSweepPath(absl::string_view field,
                                                absl::string_view path) {
  auto fields = Walk(field, path);
  if (!fields.ok()) return fields.status();
  return KindOf(fields->back());
}

bool TakesNumbers(SweepFieldKind kind) {
  return kind == SweepFieldKind::kReal || kind == SweepFieldKind::kInteger ||
         kind == SweepFieldKind::kBool;
}

absl::Status SetSweepValue(absl::string_view field,
                           const v1::SweepAssignment& assignment,
                           v1::JobSpec* spec) {
  const std::string& path = assignment.path();
  auto fields = Walk(field, path);
  if (!fields.ok()) return fields.status();
  Message* m = spec;
  for (size_t i = 0; i + 1 < fields->size(); ++i) {
    // MutableMessage on a oneof member selects it (clearing the others).
    m = m->GetReflection()->MutableMessage(m, (*fields)[i]);
  }
  const FieldDescriptor* leaf = fields->back();
  switch (assignment.value_case()) {
    case v1::SweepAssignment::kNumber:
      return SetNumber(field, path, leaf, assignment.number(), m);
    case v1::SweepAssignment::kText:
      return SetText(field, path, leaf, assignment.text(), m);
    case v1::SweepAssignment::VALUE_NOT_SET:
      break;
  }
  return Invalid(field, absl::StrCat("\"", path, "\" has no value"));
}

std::string FormatAssignment(const v1::SweepAssignment& assignment) {
  if (assignment.value_case() == v1::SweepAssignment::kText) {
    return absl::StrCat(assignment.path(), "=", assignment.text());
  }
  return absl::StrFormat("%s=%.6g", assignment.path(), assignment.number());
}

}  // namespace ps

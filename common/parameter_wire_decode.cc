// ParameterService's messages read in place: ParsePushRequest,
// ParsePullResponse and ViewOf (parameter_wire.h), with Protobuf's rules.
#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/parameter_wire.h"
#include "common/parameter_wire_fields.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/stubs/common.h"

namespace ps {
namespace {

using google::protobuf::io::CodedInputStream;

// A ZeroCopyInputStream over the segments, in order; nothing is copied.
class SegmentStream final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SegmentStream(std::span<const std::string_view> segments)
      : segments_(segments) {}

  bool Next(const void** data, int* size) override {
    while (index_ < segments_.size()) {
      std::string_view s = segments_[index_];
      if (offset_ < s.size()) {
        const size_t n = std::min<size_t>(s.size() - offset_, INT_MAX);
        *data = s.data() + offset_;
        *size = static_cast<int>(n);
        offset_ += n;
        count_ += n;
        return true;
      }
      ++index_;
      offset_ = 0;
    }
    return false;
  }
  void BackUp(int count) override {
    // Only ever after Next, by at most what it returned (the interface's rule).
    offset_ -= count;
    count_ -= count;
  }
  bool Skip(int count) override {
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) {
        BackUp(size - count);
        return true;
      }
      count -= size;
    }
    return true;
  }
  int64_t ByteCount() const override { return count_; }

 private:
  std::span<const std::string_view> segments_;
  size_t index_ = 0;
  size_t offset_ = 0;  // Within segments_[index_].
  int64_t count_ = 0;
};

// Varints read as Protobuf's parser reads them (a byte at a time: a request
// has a few per block): at most `max_bytes` bytes, bits beyond 64 dropped.
// Returns false on a longer varint or the end of the input.
bool ReadVarint(CodedInputStream* in, int max_bytes, uint64_t* value) {
  uint64_t result = 0;
  for (int i = 0; i < max_bytes; ++i) {
    uint8_t byte;
    if (!in->ReadRaw(&byte, 1)) return false;
    if (i < 10) result |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if (byte < 0x80) {
      *value = result;
      return true;
    }
  }
  return false;
}
bool ReadVarint64(CodedInputStream* in, uint64_t* value) {
  return ReadVarint(in, 10, value);
}
// A tag is at most 5 bytes, truncated to 32 bits.
bool ReadTag(CodedInputStream* in, uint32_t* tag) {
  uint64_t v;
  if (!ReadVarint(in, 5, &v)) return false;
  *tag = static_cast<uint32_t>(v);
  return true;
}
// A length is at most 5 bytes and below 2^31.
bool ReadLength(CodedInputStream* in, int* length) {
  uint64_t v;
  if (!ReadVarint(in, 5, &v) || v > static_cast<uint64_t>(INT_MAX)) {
    return false;
  }
  *length = static_cast<int>(v);
  return true;
}

absl::Status Malformed(absl::string_view what,
                       absl::string_view message = "PushRequest") {
  return absl::InvalidArgumentError(
      absl::StrCat(message, ": not a valid message (", what, ")"));
}

// Reads a length-delimited field's bytes as views into the stream's buffers.
bool ReadBytesInPlace(CodedInputStream* in, WireBytes* out) {
  int left;
  if (!ReadLength(in, &left)) return false;
  out->Clear();
  while (left > 0) {
    const void* data;
    int size;
    if (!in->GetDirectBufferPointer(&data, &size)) return false;
    const int n = std::min(size, left);
    out->Append(std::string_view(static_cast<const char*>(data), n));
    in->Skip(n);
    left -= n;
  }
  return true;
}

// Protobuf's default recursion limit (messages and groups nested).
constexpr int kMaxDepth = 100;

// Skips an unknown field with Protobuf's rules: false for a malformed one, an
// unmatched end-group, field number 0 or wire types 6 and 7. `depth` counts
// the messages and groups around it.
bool SkipUnknown(CodedInputStream* in, uint32_t tag, int depth) {
  if (WireFormatLite::GetTagFieldNumber(tag) == 0) return false;
  uint64_t ignored;
  int length;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT:
      return ReadVarint64(in, &ignored);
    case WireFormatLite::WIRETYPE_FIXED64:
      return in->Skip(8);
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
      return ReadLength(in, &length) && in->Skip(length);
    case WireFormatLite::WIRETYPE_START_GROUP: {
      if (depth + 1 > kMaxDepth) return false;
      const uint32_t end = Tag(WireFormatLite::GetTagFieldNumber(tag),
                               WireFormatLite::WIRETYPE_END_GROUP);
      while (true) {
        uint32_t inner;
        if (!ReadTag(in, &inner)) return false;
        if (inner == end) return true;
        if (!SkipUnknown(in, inner, depth + 1)) return false;
      }
    }
    case WireFormatLite::WIRETYPE_FIXED32:
      return in->Skip(4);
    default:  // END_GROUP without its START_GROUP, or wire types 6 and 7.
      return false;
  }
}

// True at the end of the input or of the current limit.
bool AtEnd(CodedInputStream* in) {
  const void* data;
  int size;
  return !in->GetDirectBufferPointer(&data, &size);
}

// Parses one Block from `in`, limited to the block's bytes (the caller checks
// that all of them were there). `field` and `message` name it in errors.
absl::Status ParseBlock(CodedInputStream* in, WireBlock* block,
                        absl::string_view field, absl::string_view message) {
  while (!AtEnd(in)) {
    uint32_t tag;
    if (!ReadTag(in, &tag)) {
      return Malformed(absl::StrCat(field, ": bad tag"), message);
    }
    switch (tag) {
      case Tag(kKeyField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t key;
        if (!ReadVarint64(in, &key)) {
          return Malformed(absl::StrCat(field, ".key"), message);
        }
        block->key = key;
        break;
      }
      case Tag(kDataField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        if (!ReadBytesInPlace(in, &block->data)) {
          return Malformed(absl::StrCat(field, ".data"), message);
        }
        break;
      default:
        if (!SkipUnknown(in, tag, 2)) {
          return Malformed(absl::StrCat(field, ": bad field"), message);
        }
    }
  }
  return absl::OkStatus();
}

// Parses one length-delimited Block at `in` into a new element of `blocks`.
absl::Status ParseNestedBlock(CodedInputStream* in,
                              std::vector<WireBlock>* blocks,
                              absl::string_view field,
                              absl::string_view message) {
  int length;
  if (!ReadLength(in, &length)) return Malformed(field, message);
  auto [limit, depth] = in->IncrementRecursionDepthAndPushLimit(length);
  if (depth < 0) {
    return Malformed(absl::StrCat(field, ": nested too deeply"), message);
  }
  PS_RETURN_IF_ERROR(ParseBlock(in, &blocks->emplace_back(), field, message));
  // A block that ends before its length (truncated input) is an error.
  if (in->BytesUntilLimit() != 0) {
    return Malformed(absl::StrCat(field, ": truncated"), message);
  }
  // Its result says whether ReadTag ended the message, which we do not use;
  // the check above is the one that matters.
  in->DecrementRecursionDepthAndPopLimit(limit);
  return absl::OkStatus();
}

// Parses one SparseRows from `in`, limited to its bytes.
absl::Status ParseSparseRows(CodedInputStream* in, WireSparseRows* rows,
                             absl::string_view message) {
  while (!AtEnd(in)) {
    uint32_t tag;
    if (!ReadTag(in, &tag)) return Malformed("sparse: bad tag", message);
    switch (tag) {
      case Tag(kSparseTableField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t table;
        if (!ReadVarint64(in, &table)) {
          return Malformed("sparse.table", message);
        }
        rows->table = static_cast<uint32_t>(table);
        break;
      }
      case Tag(kSparseKeysField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        if (!ReadBytesInPlace(in, &rows->keys)) {
          return Malformed("sparse.keys", message);
        }
        break;
      case Tag(kSparseValuesField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        if (!ReadBytesInPlace(in, &rows->values)) {
          return Malformed("sparse.values", message);
        }
        break;
      default:
        if (!SkipUnknown(in, tag, 2)) {
          return Malformed("sparse: bad field", message);
        }
    }
  }
  return absl::OkStatus();
}

// Parses one length-delimited SparseRows at `in` into a new element of
// `rows`.
absl::Status ParseNestedSparseRows(CodedInputStream* in,
                                   std::vector<WireSparseRows>* rows,
                                   absl::string_view message) {
  int length;
  if (!ReadLength(in, &length)) return Malformed("sparse", message);
  auto [limit, depth] = in->IncrementRecursionDepthAndPushLimit(length);
  if (depth < 0) return Malformed("sparse: nested too deeply", message);
  PS_RETURN_IF_ERROR(ParseSparseRows(in, &rows->emplace_back(), message));
  if (in->BytesUntilLimit() != 0) {
    return Malformed("sparse: truncated", message);
  }
  in->DecrementRecursionDepthAndPopLimit(limit);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PushView> ParsePushRequest(
    std::span<const std::string_view> segments) {
  SegmentStream stream(segments);
  CodedInputStream in(&stream);
  PushView out;
  while (!AtEnd(&in)) {
    uint32_t tag;
    if (!ReadTag(&in, &tag)) return Malformed("bad tag");
    switch (tag) {
      case Tag(kJobIdField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED): {
        int length;
        if (!ReadLength(&in, &length) || !in.ReadString(&out.job_id, length)) {
          return Malformed("job_id");
        }
        if (!google::protobuf::internal::IsStructurallyValidUTF8(
                out.job_id.data(), static_cast<int>(out.job_id.size()))) {
          return Malformed("job_id is not UTF-8");
        }
        break;
      }
      case Tag(kWorkerIndexField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("worker_index");
        out.worker_index = static_cast<int32_t>(v);
        break;
      }
      case Tag(kClockField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("clock");
        out.clock = static_cast<int64_t>(v);
        break;
      }
      case Tag(kMapVersionField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("map_version");
        out.map_version = static_cast<int64_t>(v);
        break;
      }
      case Tag(kGradientsField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        PS_RETURN_IF_ERROR(
            ParseNestedBlock(&in, &out.gradients, "gradients", "PushRequest"));
        break;
      case Tag(kGradientEncodingField, WireFormatLite::WIRETYPE_VARINT): {
        // An open enum: any int32 is kept, as Protobuf keeps it.
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("gradient_encoding");
        out.gradient_encoding =
            static_cast<v1::Precision>(static_cast<int32_t>(v));
        break;
      }
      case Tag(kPushSparseField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        PS_RETURN_IF_ERROR(
            ParseNestedSparseRows(&in, &out.sparse, "PushRequest"));
        break;
      case Tag(kMembershipVersionField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("membership_version");
        out.membership_version = static_cast<int64_t>(v);
        break;
      }
      case Tag(kPlaceField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("place");
        // int32 is sign-extended to 64 bits on the wire.
        out.place = static_cast<int32_t>(v);
        break;
      }
      default:
        if (!SkipUnknown(&in, tag, 1)) return Malformed("bad field");
    }
  }
  return out;
}

absl::StatusOr<PullView> ParsePullResponse(
    std::span<const std::string_view> segments) {
  constexpr absl::string_view kMessage = "PullResponse";
  SegmentStream stream(segments);
  CodedInputStream in(&stream);
  PullView out;
  while (!AtEnd(&in)) {
    uint32_t tag;
    if (!ReadTag(&in, &tag)) return Malformed("bad tag", kMessage);
    switch (tag) {
      case Tag(kBlocksField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        PS_RETURN_IF_ERROR(
            ParseNestedBlock(&in, &out.blocks, "blocks", kMessage));
        break;
      case Tag(kMinClockField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("min_clock", kMessage);
        out.min_clock = static_cast<int64_t>(v);
        break;
      }
      case Tag(kWorkerClocksField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v)) return Malformed("worker_clocks", kMessage);
        out.worker_clocks.push_back(static_cast<int64_t>(v));
        break;
      }
      case Tag(kWorkerClocksField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED): {
        // Packed (proto3's default): varints up to the length.
        int length;
        if (!ReadLength(&in, &length)) {
          return Malformed("worker_clocks", kMessage);
        }
        const CodedInputStream::Limit limit = in.PushLimit(length);
        while (!AtEnd(&in)) {
          uint64_t v;
          if (!ReadVarint64(&in, &v)) {
            return Malformed("worker_clocks", kMessage);
          }
          out.worker_clocks.push_back(static_cast<int64_t>(v));
        }
        if (in.BytesUntilLimit() != 0) {
          return Malformed("worker_clocks: truncated", kMessage);
        }
        in.PopLimit(limit);
        break;
      }
      case Tag(kPullSparseField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED):
        PS_RETURN_IF_ERROR(ParseNestedSparseRows(&in, &out.sparse, kMessage));
        break;
      case Tag(kValueEncodingField, WireFormatLite::WIRETYPE_VARINT): {
        uint64_t v;
        if (!ReadVarint64(&in, &v))
          return Malformed("value_encoding", kMessage);
        // An enum is an int32 on the wire (as Protobuf reads it).
        out.value_encoding =
            static_cast<v1::Precision>(static_cast<int32_t>(v));
        break;
      }
      default:
        if (!SkipUnknown(&in, tag, 1)) return Malformed("bad field", kMessage);
    }
  }
  return out;
}

absl::Status CopyPulledValues(const WireBytes& data, v1::Precision encoding,
                              size_t count, float* out) {
  const size_t value_bytes = WireValueBytes(encoding);
  if (value_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("value_encoding: ", static_cast<int>(encoding),
                     " is not an encoding (FP32, FP16 or BF16)"));
  }
  if (data.size() != count * value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "values: ", data.size(), " bytes, expected ", count * value_bytes, " (",
        count, " values in ", v1::Precision_Name(encoding), ")"));
  }
  if (encoding == v1::FP32) {
    char* to = reinterpret_cast<char*>(out);
    for (std::string_view piece : data.pieces()) {
      std::memcpy(to, piece.data(), piece.size());
      to += piece.size();
    }
    return absl::OkStatus();
  }
  ForEachGradientRun(data, encoding,
                     [out](size_t first, std::span<const float> run) {
                       std::memcpy(out + first, run.data(), run.size_bytes());
                     });
  return absl::OkStatus();
}

PushView ViewOf(const v1::PushRequest& request) {
  PushView view;
  view.job_id = request.job_id();
  view.worker_index = request.worker_index();
  view.clock = request.clock();
  view.map_version = request.map_version();
  view.membership_version = request.membership_version();
  if (request.has_place()) view.place = request.place();
  view.gradient_encoding = request.gradient_encoding();
  view.gradients.reserve(request.gradients_size());
  for (const v1::Block& g : request.gradients()) {
    WireBlock& block = view.gradients.emplace_back();
    block.key = g.key();
    block.data.Append(g.data());
  }
  view.sparse.reserve(request.sparse_size());
  for (const v1::SparseRows& r : request.sparse()) {
    WireSparseRows& rows = view.sparse.emplace_back();
    rows.table = r.table();
    rows.keys.Append(r.keys());
    rows.values.Append(r.values());
  }
  return view;
}

}  // namespace ps

// ParameterService's messages written without extra copies: PushFramer
// and EncodePullResponse (parameter_wire.h), byte for byte as Protobuf
// serializes them.
#include <algorithm>
#include <cstring>
#include <string>

#include "common/logging.h"
#include "common/parameter_wire.h"
#include "common/parameter_wire_fields.h"
#include "google/protobuf/io/coded_stream.h"

namespace ps {
namespace {

using google::protobuf::io::CodedOutputStream;

void AppendVarint(uint64_t value, std::string* out) {
  uint8_t buf[10];
  uint8_t* end = CodedOutputStream::WriteVarint64ToArray(value, buf);
  out->append(reinterpret_cast<const char*>(buf), end - buf);
}

size_t VarintSize(uint64_t value) {
  return CodedOutputStream::VarintSize64(value);
}

char* WriteVarint(uint64_t value, char* out) {
  return reinterpret_cast<char*>(CodedOutputStream::WriteVarint64ToArray(
      value, reinterpret_cast<uint8_t*>(out)));
}

// Bytes of a Block {key, data of `data_bytes`} without its own tag and length.
size_t BlockBodySize(uint64_t key, size_t data_bytes) {
  size_t n = 0;
  if (key != 0) n += 1 + VarintSize(key);
  if (data_bytes != 0) n += 1 + VarintSize(data_bytes) + data_bytes;
  return n;
}

// Bytes of a SparseRows {table, keys, values} without its own tag and length.
size_t SparseRowsBodySize(uint32_t table, size_t keys_bytes,
                          size_t values_bytes) {
  size_t n = 0;
  if (table != 0) n += 1 + VarintSize(table);
  if (keys_bytes != 0) n += 1 + VarintSize(keys_bytes) + keys_bytes;
  if (values_bytes != 0) n += 1 + VarintSize(values_bytes) + values_bytes;
  return n;
}

// Writes a length-delimited field's tag, length and bytes.
char* WriteBytesField(int field, std::string_view bytes, char* p) {
  if (bytes.empty()) return p;
  p = WriteVarint(Tag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
  p = WriteVarint(bytes.size(), p);
  std::memcpy(p, bytes.data(), bytes.size());
  return p + bytes.size();
}

// Writes a whole SparseRows field (tag `field`) with its body.
char* WriteSparseRows(int field, uint32_t table, std::string_view keys,
                      std::string_view values, char* p) {
  p = WriteVarint(Tag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
  p = WriteVarint(SparseRowsBodySize(table, keys.size(), values.size()), p);
  if (table != 0) {
    p = WriteVarint(Tag(kSparseTableField, WireFormatLite::WIRETYPE_VARINT), p);
    p = WriteVarint(table, p);
  }
  p = WriteBytesField(kSparseKeysField, keys, p);
  return WriteBytesField(kSparseValuesField, values, p);
}

// Bytes of a whole SparseRows field (tag `field`).
size_t SparseRowsFieldSize(int field, uint32_t table, size_t keys_bytes,
                           size_t values_bytes) {
  const size_t body = SparseRowsBodySize(table, keys_bytes, values_bytes);
  return VarintSize(Tag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) +
         VarintSize(body) + body;
}

// Writes `values` in `encoding` (FP32, FP16 or BF16) at p: the float32 bytes
// copied, or each value rounded to 16 bits (little-endian) through a small
// aligned buffer. Returns the end.
char* WriteValues(std::span<const float> values, v1::Precision encoding,
                  char* p) {
  if (encoding == v1::FP32) {
    std::memcpy(p, values.data(), values.size_bytes());
    return p + values.size_bytes();
  }
  alignas(64) uint16_t run[kFloatRun];
  for (size_t first = 0; first < values.size(); first += kFloatRun) {
    const std::span<const float> part =
        values.subspan(first, std::min(kFloatRun, values.size() - first));
    if (encoding == v1::FP16) {
      EncodeFp16(part, run);
    } else {
      EncodeBf16(part, run);
    }
    std::memcpy(p, run, part.size() * sizeof(uint16_t));
    p += part.size() * sizeof(uint16_t);
  }
  return p;
}

// Writes a pull reply's SparseRows field (no keys) with `values` in
// `encoding`.
char* WriteReplyRows(uint32_t table, std::span<const float> values,
                     v1::Precision encoding, char* p) {
  const size_t values_bytes = values.size() * WireValueBytes(encoding);
  p = WriteVarint(
      Tag(kPullSparseField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
  p = WriteVarint(SparseRowsBodySize(table, 0, values_bytes), p);
  if (table != 0) {
    p = WriteVarint(Tag(kSparseTableField, WireFormatLite::WIRETYPE_VARINT), p);
    p = WriteVarint(table, p);
  }
  if (values_bytes == 0) return p;
  p = WriteVarint(
      Tag(kSparseValuesField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
  p = WriteVarint(values_bytes, p);
  return WriteValues(values, encoding, p);
}

}  // namespace

PushFramer::PushFramer(const std::string& job_id, int32_t worker_index,
                       int64_t clock, int64_t map_version,
                       v1::Precision gradient_encoding,
                       int64_t membership_version) {
  // Fields in number order and zeros left out, as Protobuf writes them.
  if (!job_id.empty()) {
    AppendVarint(Tag(kJobIdField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
                 &header_);
    AppendVarint(job_id.size(), &header_);
    header_.append(job_id);
  }
  if (worker_index != 0) {
    AppendVarint(Tag(kWorkerIndexField, WireFormatLite::WIRETYPE_VARINT),
                 &header_);
    // int32 is sign-extended to 64 bits on the wire.
    AppendVarint(static_cast<uint64_t>(static_cast<int64_t>(worker_index)),
                 &header_);
  }
  if (clock != 0) {
    AppendVarint(Tag(kClockField, WireFormatLite::WIRETYPE_VARINT), &header_);
    AppendVarint(static_cast<uint64_t>(clock), &header_);
  }
  if (map_version != 0) {
    AppendVarint(Tag(kMapVersionField, WireFormatLite::WIRETYPE_VARINT),
                 &header_);
    AppendVarint(static_cast<uint64_t>(map_version), &header_);
  }
  // After the gradients (field 5), as Protobuf writes fields in number order.
  if (gradient_encoding != v1::FP32) {
    AppendVarint(Tag(kGradientEncodingField, WireFormatLite::WIRETYPE_VARINT),
                 &trailer_);
    // An enum is an int32: sign-extended to 64 bits on the wire.
    AppendVarint(static_cast<uint64_t>(static_cast<int64_t>(
                     static_cast<int32_t>(gradient_encoding))),
                 &trailer_);
  }
  // After the sparse rows (field 7).
  if (membership_version != 0) {
    AppendVarint(Tag(kMembershipVersionField, WireFormatLite::WIRETYPE_VARINT),
                 &ending_);
    AppendVarint(static_cast<uint64_t>(membership_version), &ending_);
  }
}

std::string PushFramer::PlaceField(int32_t place) {
  std::string field;
  AppendVarint(Tag(kPlaceField, WireFormatLite::WIRETYPE_VARINT), &field);
  // int32 is sign-extended to 64 bits on the wire.
  AppendVarint(static_cast<uint64_t>(static_cast<int64_t>(place)), &field);
  return field;
}

WireMessage EncodePullResponse(std::span<const ReplyBlock> blocks,
                               int64_t min_clock,
                               std::span<const int64_t> worker_clocks,
                               WireBufferPool* pool,
                               const ReplyAllocator& allocate,
                               std::span<const ReplyRows> sparse,
                               v1::Precision value_encoding) {
  // Sizes first, then one pass of writes into a buffer of exactly that size;
  // fields in number order and zeros left out, as Protobuf writes them.
  const size_t value_bytes = WireValueBytes(value_encoding);
  PS_CHECK(value_bytes != 0);
  const uint32_t block_tag =
      Tag(kBlocksField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  size_t size = 0;
  for (const ReplyBlock& b : blocks) {
    const size_t body = BlockBodySize(b.key, b.values.size() * value_bytes);
    size += VarintSize(block_tag) + VarintSize(body) + body;
  }
  if (min_clock != 0) {
    size += 1 + VarintSize(static_cast<uint64_t>(min_clock));
  }
  size_t clocks_bytes = 0;
  for (int64_t c : worker_clocks) {
    clocks_bytes += VarintSize(static_cast<uint64_t>(c));
  }
  if (!worker_clocks.empty()) {
    size += 1 + VarintSize(clocks_bytes) + clocks_bytes;
  }
  for (const ReplyRows& r : sparse) {
    size += SparseRowsFieldSize(kPullSparseField, r.table, 0,
                                r.values.size() * value_bytes);
  }
  if (value_encoding != v1::FP32) {
    size += 1 + VarintSize(static_cast<uint64_t>(value_encoding));
  }
  WireMessage out = allocate          ? allocate(size)
                    : pool != nullptr ? pool->Take(size)
                                      : WireMessage::Allocate(size);
  PS_CHECK(out.size() == size);
  char* p = out.data();
  for (const ReplyBlock& b : blocks) {
    const size_t data_bytes = b.values.size() * value_bytes;
    p = WriteVarint(block_tag, p);
    p = WriteVarint(BlockBodySize(b.key, data_bytes), p);
    if (b.key != 0) {
      p = WriteVarint(Tag(kKeyField, WireFormatLite::WIRETYPE_VARINT), p);
      p = WriteVarint(b.key, p);
    }
    if (data_bytes != 0) {
      p = WriteVarint(
          Tag(kDataField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
      p = WriteVarint(data_bytes, p);
      p = WriteValues(b.values, value_encoding, p);
    }
  }
  if (min_clock != 0) {
    p = WriteVarint(Tag(kMinClockField, WireFormatLite::WIRETYPE_VARINT), p);
    p = WriteVarint(static_cast<uint64_t>(min_clock), p);
  }
  if (!worker_clocks.empty()) {
    p = WriteVarint(
        Tag(kWorkerClocksField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), p);
    p = WriteVarint(clocks_bytes, p);
    for (int64_t c : worker_clocks) {
      p = WriteVarint(static_cast<uint64_t>(c), p);
    }
  }
  for (const ReplyRows& r : sparse) {
    p = WriteReplyRows(r.table, r.values, value_encoding, p);
  }
  if (value_encoding != v1::FP32) {
    p = WriteVarint(Tag(kValueEncodingField, WireFormatLite::WIRETYPE_VARINT),
                    p);
    p = WriteVarint(static_cast<uint64_t>(value_encoding), p);
  }
  PS_CHECK(p == out.data() + size);
  return out;
}

std::string PushFramer::BlockPrefix(uint64_t key, size_t data_bytes) {
  std::string block;  // The Block's fields but the data bytes.
  if (key != 0) {
    AppendVarint(Tag(kKeyField, WireFormatLite::WIRETYPE_VARINT), &block);
    AppendVarint(key, &block);
  }
  if (data_bytes != 0) {
    AppendVarint(Tag(kDataField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
                 &block);
    AppendVarint(data_bytes, &block);
  }
  std::string prefix;
  AppendVarint(Tag(kGradientsField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED),
               &prefix);
  AppendVarint(block.size() + data_bytes, &prefix);
  prefix.append(block);
  return prefix;
}

std::string PushFramer::SparseRowsField(uint32_t table, std::string_view keys,
                                        std::string_view values) {
  std::string field(
      SparseRowsFieldSize(kPushSparseField, table, keys.size(), values.size()),
      '\0');
  char* end =
      WriteSparseRows(kPushSparseField, table, keys, values, field.data());
  PS_CHECK(end == field.data() + field.size());
  return field;
}

}  // namespace ps

#include "common/parameter_wire.h"

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/wire_format_lite.h"

namespace ps {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

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
constexpr int kKeyField = v1::Block::kKeyFieldNumber;
constexpr int kDataField = v1::Block::kDataFieldNumber;

constexpr uint32_t Tag(int field, WireFormatLite::WireType type) {
  return (static_cast<uint32_t>(field) << 3) | type;
}

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

}  // namespace

// A value is NaN or Inf exactly when its exponent bits are all ones. The bits
// are reduced in 16 independent lanes of fixed width: integer arithmetic that
// GCC's -O2 vectorises (a float sum would be one serial chain of adds, about
// 4 cycles a value, and slow on denormals). (bits & 0x7f800000) + 0x00800000
// reaches bit 31 exactly when the exponent is all ones.
bool AllFinite(std::span<const float> values) {
  constexpr size_t kLanes = 16;
  constexpr uint32_t kExponent = 0x7f800000u;
  constexpr uint32_t kCarry = 0x00800000u;
  uint32_t lanes[kLanes] = {};
  const float* const p = values.data();
  const size_t n = values.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    uint32_t bits[kLanes];
    std::memcpy(bits, p + i, sizeof(bits));
    for (size_t j = 0; j < kLanes; ++j) {
      lanes[j] |= (bits[j] & kExponent) + kCarry;
    }
  }
  uint32_t any = 0;
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof(bits));
    any |= (bits & kExponent) + kCarry;
  }
  for (uint32_t lane : lanes) any |= lane;
  return (any & 0x80000000u) == 0;
}

bool AllFinite(const WireBytes& bytes) {
  bool finite = true;
  ForEachFloatRun(bytes, [&](size_t, std::span<const float> run) {
    finite = finite && AllFinite(run);
  });
  return finite;
}

bool AllFinite(const WireBytes& bytes, v1::Precision encoding) {
  if (encoding == v1::FP32) return AllFinite(bytes);
  bool finite = true;
  ForEachRun<uint16_t>(bytes, [&](size_t, std::span<const uint16_t> run) {
    finite = finite &&
             (encoding == v1::FP16 ? AllFiniteFp16(run) : AllFiniteBf16(run));
  });
  return finite;
}

std::string WireBytes::ToString() const {
  std::string out;
  out.reserve(size_);
  for (std::string_view p : pieces_) out.append(p);
  return out;
}

v1::PushRequest PushView::Header() const {
  v1::PushRequest header;
  header.set_job_id(job_id);
  header.set_worker_index(worker_index);
  header.set_clock(clock);
  header.set_map_version(map_version);
  header.set_gradient_encoding(gradient_encoding);
  return header;
}

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
      default:
        if (!SkipUnknown(&in, tag, 1)) return Malformed("bad field", kMessage);
    }
  }
  return out;
}

PushView ViewOf(const v1::PushRequest& request) {
  PushView view;
  view.job_id = request.job_id();
  view.worker_index = request.worker_index();
  view.clock = request.clock();
  view.map_version = request.map_version();
  view.gradient_encoding = request.gradient_encoding();
  view.gradients.reserve(request.gradients_size());
  for (const v1::Block& g : request.gradients()) {
    WireBlock& block = view.gradients.emplace_back();
    block.key = g.key();
    block.data.Append(g.data());
  }
  return view;
}

namespace {

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

}  // namespace

PushFramer::PushFramer(const std::string& job_id, int32_t worker_index,
                       int64_t clock, int64_t map_version,
                       v1::Precision gradient_encoding) {
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
}

WireMessage::WireMessage(WireMessage&& other) noexcept
    : data_(std::move(other.data_)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      pool_(std::move(other.pool_)),
      borrowed_(std::exchange(other.borrowed_, nullptr)),
      keep_alive_(std::move(other.keep_alive_)) {}

WireMessage& WireMessage::operator=(WireMessage&& other) noexcept {
  if (this != &other) {
    WireMessage old(std::move(*this));
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    pool_ = std::move(other.pool_);
    borrowed_ = std::exchange(other.borrowed_, nullptr);
    keep_alive_ = std::move(other.keep_alive_);
  }
  return *this;
}

WireMessage::~WireMessage() {
  if (pool_ != nullptr && data_ != nullptr) {
    pool_->Return(std::move(data_), capacity_);
  }
}

WireMessage WireMessage::Allocate(size_t size) {
  WireMessage out;
  out.data_.reset(new char[size]);  // Uninitialised: every byte is written.
  out.size_ = size;
  out.capacity_ = size;
  return out;
}

WireMessage WireMessage::Borrow(char* data, size_t size,
                                std::shared_ptr<const void> keep_alive) {
  WireMessage out;
  out.borrowed_ = data;
  out.size_ = size;
  out.capacity_ = size;
  out.keep_alive_ = std::move(keep_alive);
  return out;
}

WireMessage WireBufferPool::Take(size_t size) {
  if (size < kMinPooledBytes) return WireMessage::Allocate(size);
  WireMessage out;
  out.size_ = size;
  out.pool_ = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= size && it->second / 2 <= size) {
        out.data_ = std::move(it->first);
        out.capacity_ = it->second;
        free_.erase(it);
        return out;
      }
    }
  }
  out.data_.reset(new char[size]);  // Uninitialised: every byte is written.
  out.capacity_ = size;
  return out;
}

void WireBufferPool::Return(std::unique_ptr<char[]> data, size_t capacity) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(free_.size()) < max_free_) {
    free_.emplace_back(std::move(data), capacity);
  } else if (!free_.empty()) {
    // Keep the most recently used buffers (the likeliest sizes).
    free_.erase(free_.begin());
    free_.emplace_back(std::move(data), capacity);
  }
}

int WireBufferPool::free_buffers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(free_.size());
}

WireMessage EncodePullResponse(std::span<const ReplyBlock> blocks,
                               int64_t min_clock,
                               std::span<const int64_t> worker_clocks,
                               WireBufferPool* pool,
                               const ReplyAllocator& allocate) {
  // Sizes first, then one pass of writes into a buffer of exactly that size;
  // fields in number order and zeros left out, as Protobuf writes them.
  const uint32_t block_tag =
      Tag(kBlocksField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  size_t size = 0;
  for (const ReplyBlock& b : blocks) {
    const size_t body = BlockBodySize(b.key, b.values.size_bytes());
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
  WireMessage out = allocate          ? allocate(size)
                    : pool != nullptr ? pool->Take(size)
                                      : WireMessage::Allocate(size);
  PS_CHECK(out.size() == size);
  char* p = out.data();
  for (const ReplyBlock& b : blocks) {
    const size_t data_bytes = b.values.size_bytes();
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
      std::memcpy(p, b.values.data(), data_bytes);
      p += data_bytes;
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

}  // namespace ps

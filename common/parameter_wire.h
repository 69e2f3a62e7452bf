// ParameterService's big messages on the wire without extra copies of their
// float payloads (docs/benchmarks.md, "How the data path moves bytes now").
// Push: the client frames gradient memory in place, the server reads gradients
// where gRPC received them. Pull: the server writes its reply's bytes with one
// copy of the values, the client reads them where gRPC received them. The bytes
// are exactly those of ps.v1's PushRequest and PullResponse
// (proto/ps/v1/parameter.proto); only who copies them changes. Nothing here
// depends on gRPC. Reading is parameter_wire_decode.cc, writing
// parameter_wire_encode.cc, the reply buffers common/wire_message.h.
#ifndef PS_COMMON_PARAMETER_WIRE_H_
#define PS_COMMON_PARAMETER_WIRE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "common/half_codec.h"
#include "common/wire_message.h"
#include "ps/v1/parameter.pb.h"

namespace ps {

// The bytes of one field, possibly split over several buffers (the slices
// gRPC received them in). Holds views: the buffers must outlive it.
class WireBytes {
 public:
  WireBytes() = default;
  explicit WireBytes(std::string_view contiguous) { Append(contiguous); }

  void Append(std::string_view piece) {
    if (piece.empty()) return;
    pieces_.push_back(piece);
    size_ += piece.size();
  }
  void Clear() {
    pieces_.clear();
    size_ = 0;
  }
  size_t size() const { return size_; }
  const absl::InlinedVector<std::string_view, 2>& pieces() const {
    return pieces_;
  }
  // The bytes as one string (a copy; for tests and logs).
  std::string ToString() const;

 private:
  absl::InlinedVector<std::string_view, 2> pieces_;
  size_t size_ = 0;
};

// Calls fn(first, values) for consecutive runs of the values of type T in
// `bytes` (which must hold a whole number of them): `values` are values
// first .. first + values.size() - 1, at most kFloatRun at a time. Where a
// piece's values lie aligned for T (a server's own float arrays, such as a
// BSP clock's averaged gradient), `values` are read where they lie;
// elsewhere they are copied into a small aligned buffer (cache-resident)
// whatever the pieces' alignment and wherever they cut a value.
inline constexpr size_t kFloatRun = 4096;
template <typename T, typename Fn>
void ForEachRun(const WireBytes& bytes, Fn fn) {
  alignas(64) T run[kFloatRun];
  char* const out = reinterpret_cast<char*>(run);
  size_t filled = 0;  // Bytes of `run` filled.
  size_t first = 0;   // Index of run[0].
  for (std::string_view piece : bytes.pieces()) {
    if (filled == 0 &&
        reinterpret_cast<uintptr_t>(piece.data()) % alignof(T) == 0) {
      // In place: the piece's whole values, a run at a time.
      const T* values = reinterpret_cast<const T*>(piece.data());
      const size_t whole = piece.size() / sizeof(T);
      size_t done = 0;
      for (; done + kFloatRun <= whole; done += kFloatRun) {
        // A constant length, as from the buffer below, so that fn's loops
        // over it vectorise once inlined.
        fn(first, std::span<const T>(values + done, kFloatRun));
        first += kFloatRun;
      }
      if (done < whole) {
        fn(first, std::span<const T>(values + done, whole - done));
        first += whole - done;
      }
      piece.remove_prefix(whole * sizeof(T));
    }
    while (!piece.empty()) {
      const size_t n = std::min(piece.size(), sizeof(run) - filled);
      std::memcpy(out + filled, piece.data(), n);
      filled += n;
      piece.remove_prefix(n);
      if (filled == sizeof(run)) {
        fn(first, std::span<const T>(run, kFloatRun));
        first += kFloatRun;
        filled = 0;
      }
    }
  }
  if (filled >= sizeof(T)) {
    fn(first, std::span<const T>(run, filled / sizeof(T)));
  }
}

// ForEachRun of float32 values.
template <typename Fn>
void ForEachFloatRun(const WireBytes& bytes, Fn fn) {
  ForEachRun<float>(bytes, fn);
}

// Bytes a value takes on the wire in a gradient encoding
// (PushRequest.gradient_encoding): 4 for FP32, 2 for FP16 and BF16, 0 for
// any other value (not an encoding).
inline size_t WireValueBytes(v1::Precision encoding) {
  switch (encoding) {
    case v1::FP32:
      return 4;
    case v1::FP16:
    case v1::BF16:
      return 2;
    default:
      return 0;
  }
}

// ForEachFloatRun for gradient bytes in `encoding` (FP32, FP16 or BF16;
// `bytes` hold a whole number of values): fn sees them decoded to float32
// (exactly), at most kFloatRun at a time. FP32 is ForEachFloatRun itself.
template <typename Fn>
void ForEachGradientRun(const WireBytes& bytes, v1::Precision encoding, Fn fn) {
  if (encoding == v1::FP32) {
    ForEachFloatRun(bytes, fn);
    return;
  }
  alignas(64) float decoded[kFloatRun];
  ForEachRun<uint16_t>(bytes, [&](size_t first, std::span<const uint16_t> raw) {
    if (encoding == v1::FP16) {
      DecodeFp16(raw, decoded);
    } else {
      DecodeBf16(raw, decoded);
    }
    fn(first, std::span<const float>(decoded, raw.size()));
  });
}

// True when no value is NaN or Inf. Vectorised (on the bits: an integer
// reduction), so it runs at about memory speed.
bool AllFinite(std::span<const float> values);
// The same for float32 bytes in place (a whole number of floats).
bool AllFinite(const WireBytes& bytes);
// The same for gradient bytes in `encoding` (FP32, FP16 or BF16), checked on
// the encoded bits (a decoded value is NaN or Inf exactly when its encoding
// is).
bool AllFinite(const WireBytes& bytes, v1::Precision encoding);

// One block of a push, as received.
struct WireBlock {
  uint64_t key = 0;
  WireBytes data;
};

// One SparseRows of a push or a reply, as received: views into the buffers.
struct WireSparseRows {
  uint32_t table = 0;
  WireBytes keys;    // Little-endian uint64 ids.
  WireBytes values;  // Rows in keys' order (push: gradient_encoding).
};

// A PushRequest whose gradient bytes are views into the received buffers.
struct PushView {
  std::string job_id;
  int32_t worker_index = 0;
  int64_t clock = 0;
  int64_t map_version = 0;
  std::vector<WireBlock> gradients;
  // As received: possibly a value that is no encoding (ServerJob refuses it).
  v1::Precision gradient_encoding = v1::FP32;
  // Row gradients of sparse tables.
  std::vector<WireSparseRows> sparse;
  // The membership version the push was planned under (elastic jobs).
  int64_t membership_version = 0;
  // The shard map place the push is for (PushRequest.place); nullopt if
  // unset.
  std::optional<int32_t> place;

  // The request without its gradients (what logs and fault injection see).
  v1::PushRequest Header() const;
};

// Parses the wire bytes of a ps.v1.PushRequest held in `segments` (in order),
// with Protobuf's rules: fields in any order, the last of a repeated scalar
// wins, unknown fields (groups included) skipped, strings valid UTF-8. The
// result's gradient bytes point into `segments`. Errors: INVALID_ARGUMENT
// ("PushRequest: ...") for bytes Protobuf would not parse.
absl::StatusOr<PushView> ParsePushRequest(
    std::span<const std::string_view> segments);

// A view of `request` (its gradients point into it).
PushView ViewOf(const v1::PushRequest& request);

// Builds the wire bytes of a PushRequest around gradient memory that is not
// copied: Header() is the request's fields before gradients; then, for each
// block, BlockPrefix(key, n) followed by the block's n data bytes; then
// Trailer(), the fields after gradients (gradient_encoding; empty for FP32);
// then, for each sparse table, SparseRowsField(...); then Ending() (the
// membership version; empty for 0), and PlaceField(place) when the place is
// set. The concatenation equals v1::PushRequest::SerializeAsString() of the
// same request.
class PushFramer {
 public:
  PushFramer(const std::string& job_id, int32_t worker_index, int64_t clock,
             int64_t map_version, v1::Precision gradient_encoding = v1::FP32,
             int64_t membership_version = 0);
  const std::string& Header() const { return header_; }
  const std::string& Trailer() const { return trailer_; }
  const std::string& Ending() const { return ending_; }
  // Framing of one block of `data_bytes` bytes (at most 24 bytes).
  static std::string BlockPrefix(uint64_t key, size_t data_bytes);
  // One PushRequest.sparse entry, whole (its bytes copied: rows are small).
  static std::string SparseRowsField(uint32_t table, std::string_view keys,
                                     std::string_view values);
  // PushRequest.place set to `place` (the request's last field).
  static std::string PlaceField(int32_t place);

 private:
  std::string header_;
  std::string trailer_;
  std::string ending_;
};

// A PullResponse whose block bytes are views into the received buffers.
struct PullView {
  std::vector<WireBlock> blocks;
  std::vector<WireSparseRows> sparse;  // Rows in the request's order.
  int64_t min_clock = 0;
  std::vector<int64_t> worker_clocks;
  // The format of the blocks' data and the rows' values (as received:
  // possibly a value that is no encoding; CopyPulledValues refuses it).
  v1::Precision value_encoding = v1::FP32;
};

// Writes the `count` values of pulled bytes `data` (in `encoding`: FP32, FP16
// or BF16) to out[0 .. count), decoded to float32 (exactly). Errors:
// INVALID_ARGUMENT when `encoding` is no encoding or `data` does not hold
// exactly `count` values in it (nothing is written then).
absl::Status CopyPulledValues(const WireBytes& data, v1::Precision encoding,
                              size_t count, float* out);

// Parses the wire bytes of a ps.v1.PullResponse held in `segments`, with
// Protobuf's rules (as ParsePushRequest; worker_clocks packed or not). The
// result's block bytes point into `segments`. Errors: INVALID_ARGUMENT
// ("PullResponse: ...").
absl::StatusOr<PullView> ParsePullResponse(
    std::span<const std::string_view> segments);

// One block of a reply: its key and values.
struct ReplyBlock {
  uint64_t key;
  std::span<const float> values;
};

// Where a reply is written: a message of exactly the size asked for.
using ReplyAllocator = std::function<WireMessage(size_t size)>;

// The rows of one sparse table in a reply.
struct ReplyRows {
  uint32_t table;
  std::span<const float> values;
};

// The bytes of the PullResponse {blocks, min_clock, worker_clocks, sparse,
// value_encoding}, written in one pass (the values copied once, rounded to
// `value_encoding` on the way when it is FP16 or BF16): equal to
// SerializeAsString() of that message. The buffer comes from `allocate` if
// set, else from `pool` if not null. `value_encoding` must be FP32, FP16 or
// BF16 (checked).
WireMessage EncodePullResponse(std::span<const ReplyBlock> blocks,
                               int64_t min_clock,
                               std::span<const int64_t> worker_clocks,
                               WireBufferPool* pool = nullptr,
                               const ReplyAllocator& allocate = nullptr,
                               std::span<const ReplyRows> sparse = {},
                               v1::Precision value_encoding = v1::FP32);

}  // namespace ps

#endif  // PS_COMMON_PARAMETER_WIRE_H_

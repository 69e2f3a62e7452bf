#include "server/sparse_bucket_codec.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the bucket format stores raw little-endian words");

template <typename T>
void AppendRaw(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

template <typename T>
T ReadRaw(const char* data) {
  T value;
  std::memcpy(&value, data, sizeof(T));
  return value;
}

constexpr size_t kRowFixedBytes = 24;  // id, clock, count.
constexpr size_t kPendingBytes = 16;   // id, count.
constexpr uint32_t kMaxDim = 1024;     // SparseTableSpec.dim.

}  // namespace

void AppendSparseBucketHeader(uint8_t optimizer_kind, uint32_t dim,
                              uint32_t state_floats, uint32_t rows,
                              uint32_t pending, std::string* out) {
  const size_t row_bytes =
      kRowFixedBytes + sizeof(float) * (size_t{dim} + state_floats);
  out->reserve(out->size() + kSparseBucketHeaderBytes + rows * row_bytes +
               pending * kPendingBytes);
  out->push_back(static_cast<char>(kSparseBucketVersion));
  out->push_back(static_cast<char>(optimizer_kind));
  AppendRaw<uint32_t>(dim, out);
  AppendRaw<uint32_t>(state_floats, out);
  AppendRaw<uint32_t>(rows, out);
  AppendRaw<uint32_t>(pending, out);
}

void AppendSparseBucketRow(uint64_t id, int64_t last_clock,
                           int64_t update_count, const float* floats,
                           size_t num_floats, std::string* out) {
  AppendRaw<uint64_t>(id, out);
  AppendRaw<int64_t>(last_clock, out);
  AppendRaw<int64_t>(update_count, out);
  out->append(reinterpret_cast<const char*>(floats),
              num_floats * sizeof(float));
}

void AppendSparseBucketPending(uint64_t id, int64_t count, std::string* out) {
  AppendRaw<uint64_t>(id, out);
  AppendRaw<int64_t>(count, out);
}

size_t SparseBucketBytes(size_t floats_per_row, size_t rows, size_t pending) {
  return kSparseBucketHeaderBytes +
         rows * (kRowFixedBytes + sizeof(float) * floats_per_row) +
         pending * kPendingBytes;
}

char* PutSparseBucketRow(char* at, uint64_t id, int64_t last_clock,
                         int64_t update_count, const float* floats,
                         size_t num_floats) {
  std::memcpy(at, &id, 8);
  std::memcpy(at + 8, &last_clock, 8);
  std::memcpy(at + 16, &update_count, 8);
  std::memcpy(at + kRowFixedBytes, floats, num_floats * sizeof(float));
  return at + kRowFixedBytes + num_floats * sizeof(float);
}

char* PutSparseBucketPending(char* at, uint64_t id, int64_t count) {
  std::memcpy(at, &id, 8);
  std::memcpy(at + 8, &count, 8);
  return at + kPendingBytes;
}

absl::StatusOr<SparseBucket> DecodeSparseBucket(std::string_view bytes) {
  if (bytes.size() < kSparseBucketHeaderBytes) {
    return absl::DataLossError(absl::StrCat("sparse bucket of ", bytes.size(),
                                            " bytes is shorter than a header"));
  }
  const auto version = static_cast<uint8_t>(bytes[0]);
  if (version != kSparseBucketVersion) {
    return absl::DataLossError(absl::StrCat("sparse bucket has format version ",
                                            version, "; this build reads ",
                                            kSparseBucketVersion));
  }
  SparseBucket bucket;
  bucket.optimizer_kind = static_cast<uint8_t>(bytes[1]);
  bucket.dim = ReadRaw<uint32_t>(bytes.data() + 2);
  bucket.state_floats = ReadRaw<uint32_t>(bytes.data() + 6);
  const uint32_t rows = ReadRaw<uint32_t>(bytes.data() + 10);
  const uint32_t pending = ReadRaw<uint32_t>(bytes.data() + 14);
  if (bucket.dim < 1 || bucket.dim > kMaxDim ||
      bucket.state_floats > 2 * kMaxDim) {
    return absl::DataLossError(
        absl::StrCat("sparse bucket with rows of dim ", bucket.dim, " and ",
                     bucket.state_floats, " state floats"));
  }
  // 64-bit arithmetic: u32 counts times these bounded widths cannot overflow.
  const uint64_t row_floats = uint64_t{bucket.dim} + bucket.state_floats;
  const uint64_t expected = kSparseBucketHeaderBytes +
                            uint64_t{rows} * (kRowFixedBytes + 4 * row_floats) +
                            uint64_t{pending} * kPendingBytes;
  if (expected != bytes.size()) {
    return absl::DataLossError(absl::StrCat(
        "sparse bucket of ", bytes.size(), " bytes; its header (", rows,
        " rows of dim ", bucket.dim, " with ", bucket.state_floats,
        " state floats, ", pending, " pending ids) needs ", expected));
  }
  bucket.ids.resize(rows);
  bucket.last_clocks.resize(rows);
  bucket.update_counts.resize(rows);
  bucket.floats.resize(rows * row_floats);
  const char* p = bytes.data() + kSparseBucketHeaderBytes;
  for (uint32_t i = 0; i < rows; ++i) {
    bucket.ids[i] = ReadRaw<uint64_t>(p);
    bucket.last_clocks[i] = ReadRaw<int64_t>(p + 8);
    bucket.update_counts[i] = ReadRaw<int64_t>(p + 16);
    p += kRowFixedBytes;
    if (row_floats > 0) {
      std::memcpy(bucket.floats.data() + i * row_floats, p, 4 * row_floats);
    }
    p += 4 * row_floats;
  }
  bucket.pending_ids.resize(pending);
  bucket.pending_counts.resize(pending);
  for (uint32_t i = 0; i < pending; ++i) {
    bucket.pending_ids[i] = ReadRaw<uint64_t>(p);
    bucket.pending_counts[i] = ReadRaw<int64_t>(p + 8);
    p += kPendingBytes;
  }
  return bucket;
}

}  // namespace ps

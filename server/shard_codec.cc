#include "server/shard_codec.h"

#include <bit>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sparse_keys.h"

namespace ps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "stored floats are raw little-endian float32");

uint64_t ReadBigEndian(const char* data, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) {
    value = (value << 8) | static_cast<unsigned char>(data[i]);
  }
  return value;
}

int64_t DecodeInt64(const char* data) {
  uint64_t bits = 0;
  for (size_t i = kStoredInt64Bytes; i-- > 0;) {
    bits = (bits << 8) | static_cast<unsigned char>(data[i]);
  }
  return static_cast<int64_t>(bits);
}

// Copies raw float32 bytes; false if their size is not a multiple of four.
bool DecodeFloats(absl::string_view bytes, std::vector<float>* out) {
  if (bytes.size() % sizeof(float) != 0) return false;
  out->resize(bytes.size() / sizeof(float));
  if (!out->empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return true;
}

std::string BlockName(uint64_t key) {
  return absl::StrCat("block key ", key, " (tensor ", key >> 32, ", block ",
                      key & 0xffffffffu, ")");
}

}  // namespace

std::string StoredJobPrefix(const std::string& job_id) {
  std::string prefix = job_id;
  prefix.push_back('\0');
  return prefix;
}

StoredJobDecoder::StoredJobDecoder(std::string job_id)
    : job_id_(std::move(job_id)), prefix_(StoredJobPrefix(job_id_)) {}

absl::Status StoredJobDecoder::DataLoss(absl::string_view what) const {
  return absl::DataLossError(
      absl::StrCat("rocksdb shard store: job ", job_id_, ": ", what));
}

void StoredJobDecoder::SetMeta(std::string meta) {
  job_.meta = std::move(meta);
  has_meta_ = true;
}

absl::Status StoredJobDecoder::AddValues(absl::string_view key,
                                         absl::string_view value) {
  if (key.size() == prefix_.size() + kStoredBlockKeyBytes + 1 &&
      key.back() == kStoredRowsSuffix && absl::StartsWith(key, prefix_)) {
    return AddRows(key, value);
  }
  if (key.size() != prefix_.size() + kStoredBlockKeyBytes ||
      !absl::StartsWith(key, prefix_)) {
    return DataLoss(
        absl::StrCat("values key of ", key.size(), " bytes is malformed"));
  }
  const uint64_t block_key =
      ReadBigEndian(key.data() + prefix_.size(), kStoredBlockKeyBytes);
  if (!job_.blocks.empty() && job_.blocks.back().key >= block_key) {
    return DataLoss(
        absl::StrCat(BlockName(block_key), ": values out of order"));
  }
  StoredBlock& block = job_.blocks.emplace_back();
  block.key = block_key;
  if (!DecodeFloats(value, &block.values)) {
    return DataLoss(absl::StrCat(BlockName(block.key), ": values of ",
                                 value.size(),
                                 " bytes are not whole float32s"));
  }
  return absl::OkStatus();
}

absl::Status StoredJobDecoder::AddRows(absl::string_view key,
                                       absl::string_view value) {
  const uint64_t block_key =
      ReadBigEndian(key.data() + prefix_.size(), kStoredBlockKeyBytes);
  // The rows record sorts right after its block's values record.
  if (!IsBucketKey(block_key) || job_.blocks.empty() ||
      job_.blocks.back().key != block_key || !job_.blocks.back().rows.empty()) {
    return DataLoss(absl::StrCat(BlockName(block_key),
                                 ": rows record without its bucket's values"));
  }
  job_.blocks.back().rows = std::string(value);
  return absl::OkStatus();
}

absl::Status StoredJobDecoder::AddOptimizer(absl::string_view key,
                                            absl::string_view value) {
  if (key.size() != prefix_.size() + kStoredBlockKeyBytes ||
      !absl::StartsWith(key, prefix_)) {
    return DataLoss(
        absl::StrCat("optimizer key of ", key.size(), " bytes is malformed"));
  }
  const uint64_t block_key =
      ReadBigEndian(key.data() + prefix_.size(), kStoredBlockKeyBytes);
  if (next_optimizer_ >= job_.blocks.size() ||
      job_.blocks[next_optimizer_].key != block_key) {
    return DataLoss(absl::StrCat(BlockName(block_key),
                                 ": optimizer state without values, or values "
                                 "without optimizer state"));
  }
  StoredBlock& block = job_.blocks[next_optimizer_++];
  if (value.size() < kStoredInt64Bytes ||
      !DecodeFloats(value.substr(kStoredInt64Bytes), &block.optimizer_state)) {
    return DataLoss(absl::StrCat(BlockName(block_key), ": optimizer record of ",
                                 value.size(), " bytes is malformed"));
  }
  block.optimizer_step = DecodeInt64(value.data());
  return absl::OkStatus();
}

absl::Status StoredJobDecoder::AddClock(absl::string_view key,
                                        absl::string_view value) {
  if (key.size() != prefix_.size() + kStoredWorkerBytes ||
      !absl::StartsWith(key, prefix_)) {
    return DataLoss(
        absl::StrCat("clock key of ", key.size(), " bytes is malformed"));
  }
  const auto worker = static_cast<int32_t>(static_cast<uint32_t>(
      ReadBigEndian(key.data() + prefix_.size(), kStoredWorkerBytes)));
  if (value.size() != kStoredInt64Bytes) {
    return DataLoss(absl::StrCat("clock of worker ", worker, ": value of ",
                                 value.size(), " bytes is malformed"));
  }
  job_.worker_clocks[worker] = DecodeInt64(value.data());
  return absl::OkStatus();
}

absl::Status StoredJobDecoder::AddLog(absl::string_view key,
                                      absl::string_view value) {
  if (!absl::StartsWith(key, prefix_)) {
    return DataLoss(
        absl::StrCat("update log key of ", key.size(), " bytes is malformed"));
  }
  if (key.size() == prefix_.size()) {
    // The marker: the log_sequence of the last snapshot. It sorts first.
    if (has_log_ || value.size() != kStoredInt64Bytes) {
      return DataLoss(absl::StrCat("update log marker of ", value.size(),
                                   " bytes is malformed or out of order"));
    }
    job_.log_sequence = DecodeInt64(value.data());
    if (job_.log_sequence < 0) {
      return DataLoss(absl::StrCat("update log marker ", job_.log_sequence,
                                   " is negative"));
    }
    has_log_ = true;
    return absl::OkStatus();
  }
  if (key.size() != prefix_.size() + kStoredInt64Bytes) {
    return DataLoss(
        absl::StrCat("update log key of ", key.size(), " bytes is malformed"));
  }
  has_log_ = true;
  const auto sequence = static_cast<int64_t>(
      ReadBigEndian(key.data() + prefix_.size(), kStoredInt64Bytes));
  // The snapshot that set the marker deleted the records it covers in the
  // same write; none may remain, and none may be missing after it.
  const int64_t expected =
      job_.log_sequence + 1 + static_cast<int64_t>(job_.log.size());
  if (sequence != expected) {
    return DataLoss(absl::StrCat("update log record ", sequence,
                                 " found where record ", expected, " belongs"));
  }
  job_.log.emplace_back(value);
  return absl::OkStatus();
}

absl::StatusOr<StoredJob> StoredJobDecoder::Finish() {
  if (next_optimizer_ != job_.blocks.size()) {
    return DataLoss(absl::StrCat(BlockName(job_.blocks[next_optimizer_].key),
                                 ": values without optimizer state"));
  }
  if (!has_meta_ && !has_log_ && job_.blocks.empty() &&
      job_.worker_clocks.empty()) {
    return absl::NotFoundError(
        absl::StrCat("rocksdb shard store: nothing stored for job ", job_id_));
  }
  return std::move(job_);
}

}  // namespace ps

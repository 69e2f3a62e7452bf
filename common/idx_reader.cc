#include "common/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// IDX element type code of unsigned bytes (the only type MNIST files use).
constexpr uint8_t kTypeUnsignedByte = 0x08;
// Bytes decoded per gzread call when reading the payload.
constexpr int64_t kChunkBytes = int64_t{1} << 20;
// Largest image (rows * cols) accepted; real data sets are far below.
constexpr int64_t kMaxDim = int64_t{1} << 30;

// Closes a gzFile on scope exit.
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// An open IDX file whose header has been parsed.
struct IdxFile {
  GzHandle handle;
  std::vector<int64_t> dims;
};

absl::StatusOr<GzHandle> Open(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    if (err != 0) return absl::ErrnoToStatus(err, path);
    return absl::InternalError(absl::StrCat(path, ": gzopen failed"));
  }
  GzHandle handle(f);
  gzbuffer(f, 1 << 18);  // Larger than the 8 KiB default: fewer reads.
  return handle;
}

// Reads exactly `n` bytes, in chunks gzread accepts (its length is unsigned).
absl::Status ReadFully(gzFile f, const std::string& path, void* out,
                       int64_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const unsigned want =
        static_cast<unsigned>(std::min<int64_t>(n, kChunkBytes));
    const int got = gzread(f, p, want);
    if (got < 0) {
      int code = Z_OK;
      const char* msg = gzerror(f, &code);
      if (code == Z_ERRNO) {
        return absl::ErrnoToStatus(errno, absl::StrCat(path, ": read failed"));
      }
      // Z_BUF_ERROR: the gzip stream ends early; Z_DATA_ERROR: corrupt.
      return absl::DataLossError(absl::StrCat(path, ": ", msg));
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": truncated (", n, " more bytes expected)"));
    }
    p += got;
    n -= got;
  }
  return absl::OkStatus();
}

uint32_t BigEndian32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) |
         (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

// Opens `path` and parses its header: a magic of two zero bytes, the element
// type, the rank, then `rank` big-endian uint32 dimensions.
absl::StatusOr<IdxFile> OpenIdx(const std::string& path, int expected_rank) {
  PS_ASSIGN_OR_RETURN(auto handle, Open(path));
  gzFile f = handle.get();
  std::array<uint8_t, 4> magic;
  PS_RETURN_IF_ERROR(ReadFully(f, path, magic.data(), magic.size()));
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad magic number 0x",
                     absl::Hex(BigEndian32(magic.data()), absl::kZeroPad8),
                     ", not an IDX file"));
  }
  if (magic[2] != kTypeUnsignedByte) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unsupported element type 0x",
                     absl::Hex(magic[2], absl::kZeroPad2),
                     " (only unsigned byte, 0x08, is supported)"));
  }
  if (magic[3] != expected_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": has ", static_cast<int>(magic[3]),
                     " dimensions, expected ", expected_rank));
  }
  std::vector<uint8_t> raw(4 * expected_rank);
  PS_RETURN_IF_ERROR(ReadFully(f, path, raw.data(), raw.size()));
  IdxFile file{std::move(handle), {}};
  for (int i = 0; i < expected_rank; ++i) {
    file.dims.push_back(BigEndian32(raw.data() + 4 * i));
  }
  return file;
}

}  // namespace

absl::StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t max_samples) {
  PS_ASSIGN_OR_RETURN(auto images, OpenIdx(images_path, 3));
  PS_ASSIGN_OR_RETURN(auto labels, OpenIdx(labels_path, 1));

  const int64_t count = images.dims[0];
  // Each dimension is below 2^32, so their product could overflow: bound
  // them first.
  const int64_t dim = images.dims[1] <= kMaxDim && images.dims[2] <= kMaxDim
                          ? images.dims[1] * images.dims[2]
                          : kMaxDim + 1;
  if (dim < 1 || dim > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": unsupported image shape ", images.dims[1],
                     "x", images.dims[2]));
  }
  if (labels.dims[0] != count) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, ": holds ", labels.dims[0], " labels but ",
                     images_path, " holds ", count, " images"));
  }
  const int64_t n = max_samples > 0 ? std::min(count, max_samples) : count;

  Dataset data;
  data.dim = dim;
  // Decode chunk by chunk, growing the output as bytes arrive, so a header
  // claiming more than the file holds fails with DATA_LOSS rather than
  // allocating its claimed size up front (not even one image's worth: an
  // image may be claimed to be a gigabyte).
  std::vector<uint8_t> buffer;
  constexpr float kScale = 1.0f / 255.0f;
  const int64_t pixels = n * dim;  // n < 2^32, dim <= 2^30: no overflow.
  for (int64_t done = 0; done < pixels;) {
    buffer.resize(std::min(kChunkBytes, pixels - done));
    PS_RETURN_IF_ERROR(ReadFully(images.handle.get(), images_path,
                                 buffer.data(), buffer.size()));
    const size_t old_size = data.features.size();
    data.features.resize(old_size + buffer.size());
    float* out = data.features.data() + old_size;
    const uint8_t* in = buffer.data();
    const int64_t m = static_cast<int64_t>(buffer.size());
    for (int64_t i = 0; i < m; ++i) out[i] = static_cast<float>(in[i]) * kScale;
    done += m;
  }

  for (int64_t done = 0; done < n;) {
    buffer.resize(std::min(kChunkBytes, n - done));
    PS_RETURN_IF_ERROR(ReadFully(labels.handle.get(), labels_path,
                                 buffer.data(), buffer.size()));
    // Unsigned bytes: every label is in [0, 256) by construction.
    data.labels.insert(data.labels.end(), buffer.begin(), buffer.end());
    done += static_cast<int64_t>(buffer.size());
  }
  data.num_samples = n;
  return data;
}

}  // namespace ps

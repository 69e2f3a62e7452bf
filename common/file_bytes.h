// Helpers shared by the project's own file formats (the update log's files,
// snapshot rows files, the data directory's format record): the status of a
// failed system call, fsync of a file or directory, a gathered write whole,
// and integers stored little-endian whatever the host.
#ifndef PS_COMMON_FILE_BYTES_H_
#define PS_COMMON_FILE_BYTES_H_

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps {

// The status for a system call that failed with the current errno: `what`
// and strerror's text. UNAVAILABLE for a full or failing disk (ENOSPC,
// EDQUOT, EIO: worth retrying once space or the device is back), INTERNAL
// otherwise. Reads errno first; thread-safe (errno is per thread).
inline absl::Status ErrnoStatus(const std::string& what) {
  const int error = errno;
  std::string message = absl::StrCat(what, ": ", std::strerror(error));
  return error == ENOSPC || error == EDQUOT || error == EIO
             ? absl::UnavailableError(message)
             : absl::InternalError(message);
}

// fsyncs `path` (a file, or a directory with O_DIRECTORY in `flags`), opened
// with `flags` | O_CLOEXEC. Errors as ErrnoStatus, their message
// "<context>: opening <path>" or "<context>: fsync of <path>" (no prefix for
// an empty context). Thread-safe.
inline absl::Status SyncPath(const std::string& path, int flags,
                             absl::string_view context = "") {
  const std::string prefix =
      context.empty() ? std::string() : absl::StrCat(context, ": ");
  const int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat(prefix, "opening ", path));
  const bool synced = fsync(fd) == 0;
  absl::Status status =
      synced ? absl::OkStatus()
             : ErrnoStatus(absl::StrCat(prefix, "fsync of ", path));
  close(fd);
  return status;
}

// Writes the buffers of `iov` in order from `offset` on (pwritev, IOV_MAX
// buffers at a time), going on after a short write or EINTR. Returns the
// offset after the last byte. Errors as ErrnoStatus, their message
// "<context>: writing <path>". Thread-safe.
inline absl::StatusOr<uint64_t> WriteGathered(int fd, std::vector<iovec> iov,
                                              uint64_t offset,
                                              absl::string_view context,
                                              const std::string& path) {
  size_t first = 0;
  while (first < iov.size()) {
    const int count =
        static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    ssize_t n =
        pwritev(fd, iov.data() + first, count, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat(context, ": writing ", path));
    }
    offset += static_cast<uint64_t>(n);
    while (n > 0 && first < iov.size()) {
      const size_t take = std::min<size_t>(n, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      n -= static_cast<ssize_t>(take);
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return offset;
}

// Writes `v` into out[0..3] / out[0..7], least significant byte first.
inline void PutUint32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
inline void PutUint64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
inline void PutInt64(int64_t v, char* out) {
  PutUint64(static_cast<uint64_t>(v), out);
}

// Reads what the Put functions above wrote.
inline uint32_t GetUint32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= uint32_t{static_cast<uint8_t>(in[i])} << (8 * i);
  }
  return v;
}
inline uint64_t GetUint64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  }
  return v;
}
inline int64_t GetInt64(const char* in) {
  return static_cast<int64_t>(GetUint64(in));
}

}  // namespace ps

#endif  // PS_COMMON_FILE_BYTES_H_

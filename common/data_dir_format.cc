#include "common/data_dir_format.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_bytes.h"

namespace ps {
namespace {

// The largest record read: a kind and a version fit in far less.
constexpr size_t kMaxRecordBytes = 256;

}  // namespace

absl::StatusOr<int> ReadDataDirFormatVersion(const std::string& dir,
                                             const DataDirFormat& format,
                                             absl::string_view context) {
  const std::string path = absl::StrCat(dir, "/", kDataDirFormatFile);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return kUnrecordedDataDirVersion;
    return absl::InternalError(absl::StrCat(context, ": cannot open ", path,
                                            ": ", std::strerror(errno)));
  }
  std::string contents(kMaxRecordBytes, '\0');
  ssize_t n = 0;
  do {
    n = read(fd, contents.data(), contents.size());
  } while (n < 0 && errno == EINTR);
  const int read_error = errno;
  close(fd);
  if (n < 0) {
    return absl::InternalError(absl::StrCat(context, ": cannot read ", path,
                                            ": ", std::strerror(read_error)));
  }
  contents.resize(static_cast<size_t>(n));
  absl::string_view line = contents;
  const bool whole = absl::ConsumeSuffix(&line, "\n");
  const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
  int version = 0;
  if (!whole || fields.size() != 2 || fields[0].empty() ||
      !absl::SimpleAtoi(fields[1], &version) || version < 1) {
    return absl::DataLossError(
        absl::StrCat(context, ": the format record ", path,
                     " is malformed (expected one line \"<kind> <version>\")"));
  }
  if (fields[0] != format.kind) {
    return absl::FailedPreconditionError(absl::StrCat(
        context, ": the data directory is a ", fields[0], " (", path,
        "), not a ", format.description, "; refusing to modify it"));
  }
  if (version > format.current_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        context, ": the data directory has format version ", version,
        "; this build reads versions ", kUnrecordedDataDirVersion, " to ",
        format.current_version, " (a newer build wrote it)"));
  }
  return version;
}

absl::Status WriteDataDirFormatVersion(const std::string& dir,
                                       const DataDirFormat& format) {
  const std::string path = absl::StrCat(dir, "/", kDataDirFormatFile);
  const std::string temporary = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << format.kind << ' ' << format.current_version << '\n';
    if (!out.flush()) return ErrnoStatus(absl::StrCat("writing ", temporary));
  }
  if (absl::Status status = SyncPath(temporary, O_RDONLY); !status.ok()) {
    return status;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(absl::StrCat("renaming ", temporary, " to ", path));
  }
  return SyncPath(dir, O_RDONLY | O_DIRECTORY);
}

}  // namespace ps

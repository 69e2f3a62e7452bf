#include "server/update_log_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "xxhash.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr size_t kHeaderBytes = 20;  // size, checksum, sequence
constexpr char kSuffix[] = ".ulog";

absl::Status Errno(const std::string& what) {
  const int error = errno;
  std::string message = absl::StrCat(what, ": ", std::strerror(error));
  return error == ENOSPC || error == EDQUOT || error == EIO
             ? absl::UnavailableError(message)
             : absl::InternalError(message);
}

void PutUint32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetUint32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return v;
}
void PutInt64(int64_t v, char* out) {
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>(static_cast<uint64_t>(v) >> (8 * i));
  }
}
int64_t GetInt64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return static_cast<int64_t>(v);
}

// XXH3 (64 bits) of a frame's payload, seeded with its sequence: a checksum
// that keeps up with the disk (RocksDB's CRC32C, as Debian builds it, cost 11 %
// of a server's CPU here).
uint64_t FrameChecksum(int64_t sequence, absl::string_view payload) {
  // Seeded with the sequence, so that a frame moved elsewhere fails too.
  return XXH3_64bits_withSeed(payload.data(), payload.size(),
                              static_cast<uint64_t>(sequence));
}

void EncodeHeader(int64_t sequence, absl::string_view payload, char* header) {
  PutUint32(static_cast<uint32_t>(payload.size()), header);
  PutInt64(sequence, header + 12);
  PutInt64(static_cast<int64_t>(FrameChecksum(sequence, payload)), header + 4);
}

struct Frame {
  int64_t sequence;
  absl::string_view payload;
};

// The readable frames of `contents` and where they end.
std::vector<Frame> ParseFrames(absl::string_view contents, size_t* valid_end) {
  std::vector<Frame> frames;
  size_t at = 0;
  while (contents.size() - at >= kHeaderBytes) {
    const char* header = contents.data() + at;
    const size_t size = GetUint32(header);
    if (contents.size() - at - kHeaderBytes < size) break;
    absl::string_view payload = contents.substr(at + kHeaderBytes, size);
    char expected[kHeaderBytes];
    EncodeHeader(GetInt64(header + 12), payload, expected);
    if (std::memcmp(expected, header, kHeaderBytes) != 0) break;
    frames.push_back({GetInt64(header + 12), payload});
    at += kHeaderBytes + size;
  }
  *valid_end = at;
  return frames;
}

absl::StatusOr<std::string> ReadWholeFile(int fd, const std::string& path) {
  std::string contents;
  char buffer[1 << 16];
  off_t offset = 0;
  while (true) {
    const ssize_t n = pread(fd, buffer, sizeof(buffer), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(absl::StrCat("update log: reading ", path));
    }
    if (n == 0) return contents;
    contents.append(buffer, n);
    offset += n;
  }
}

// Writes `records` as frames with sequences first_sequence, ... in one
// writev (the payloads are not copied), retrying short writes.
absl::Status WriteFrames(int fd, int64_t first_sequence,
                         const std::vector<std::string>& records,
                         const std::string& path) {
  std::vector<std::array<char, kHeaderBytes>> headers(records.size());
  std::vector<iovec> iov;
  iov.reserve(2 * records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EncodeHeader(first_sequence + static_cast<int64_t>(i), records[i],
                 headers[i].data());
    iov.push_back({headers[i].data(), kHeaderBytes});
    if (!records[i].empty()) {
      iov.push_back({const_cast<char*>(records[i].data()), records[i].size()});
    }
  }
  size_t first = 0;
  while (first < iov.size()) {
    const int count =
        static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    ssize_t n = writev(fd, iov.data() + first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(absl::StrCat("update log: writing ", path));
    }
    while (n > 0 && first < iov.size()) {
      const size_t take = std::min<size_t>(n, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      n -= static_cast<ssize_t>(take);
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UpdateLogFiles>> UpdateLogFiles::Open(
    std::string dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("update log: creating ", dir, ": ", error.message()));
  }
  return std::unique_ptr<UpdateLogFiles>(new UpdateLogFiles(std::move(dir)));
}

UpdateLogFiles::~UpdateLogFiles() {
  absl::MutexLock lock(&mu_);
  for (auto& [job_id, log] : logs_) {
    absl::MutexLock job_lock(&log->mu);
    if (log->fd >= 0) close(log->fd);
  }
}

// Job ids may hold any byte but '\0': the file is named by the id in hex.
std::string UpdateLogFiles::PathOf(const std::string& job_id) const {
  return absl::StrCat(dir_, "/", absl::BytesToHexString(job_id), kSuffix);
}

UpdateLogFiles::JobLog& UpdateLogFiles::LogOf(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<JobLog>& log = logs_[job_id];
  if (log == nullptr) log = std::make_unique<JobLog>();
  return *log;
}

absl::Status UpdateLogFiles::OpenForAppend(const std::string& job_id,
                                           JobLog& log) {
  if (log.fd >= 0) return absl::OkStatus();
  const std::string path = PathOf(job_id);
  std::error_code error;
  const bool existed = fs::exists(path, error);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(absl::StrCat("update log: opening ", path));
  // A new file's name must be durable before a synced record in it is
  // acknowledged: a machine crash could otherwise lose the whole file.
  if (!existed) {
    if (absl::Status synced = SyncDirectory(); !synced.ok()) {
      close(fd);
      return synced;
    }
  }
  absl::StatusOr<std::string> contents = ReadWholeFile(fd, path);
  if (!contents.ok()) {
    close(fd);
    return contents.status();
  }
  size_t valid_end = 0;
  const std::vector<Frame> frames = ParseFrames(*contents, &valid_end);
  // A tail a crash cut short is cut off, so that new frames follow the last
  // readable one.
  if ((valid_end < contents->size() && ftruncate(fd, valid_end) != 0) ||
      lseek(fd, valid_end, SEEK_SET) < 0) {
    absl::Status status = Errno(absl::StrCat("update log: preparing ", path));
    close(fd);
    return status;
  }
  log.fd = fd;
  log.last_sequence = frames.empty() ? 0 : frames.back().sequence;
  return absl::OkStatus();
}

absl::Status UpdateLogFiles::Append(const std::string& job_id,
                                    int64_t first_sequence,
                                    const std::vector<std::string>& records,
                                    bool sync) {
  JobLog& log = LogOf(job_id);
  absl::MutexLock lock(&log.mu);
  PS_RETURN_IF_ERROR(OpenForAppend(job_id, log));
  const std::string path = PathOf(job_id);
  PS_RETURN_IF_ERROR(WriteFrames(log.fd, first_sequence, records, path));
  if (sync && fdatasync(log.fd) != 0) {
    return Errno(absl::StrCat("update log: fdatasync of ", path));
  }
  if (!records.empty()) {
    log.last_sequence =
        first_sequence + static_cast<int64_t>(records.size()) - 1;
  }
  return absl::OkStatus();
}

absl::Status UpdateLogFiles::DropThrough(const std::string& job_id,
                                         int64_t sequence, bool sync) {
  const std::string path = PathOf(job_id);
  JobLog& log = LogOf(job_id);
  absl::MutexLock lock(&log.mu);
  if (log.fd < 0) {
    std::error_code error;
    if (!fs::exists(path, error)) return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(OpenForAppend(job_id, log));
  if (log.last_sequence <= sequence) {
    if (ftruncate(log.fd, 0) != 0 || lseek(log.fd, 0, SEEK_SET) < 0 ||
        (sync && fdatasync(log.fd) != 0)) {
      return Errno(absl::StrCat("update log: truncating ", path));
    }
    log.last_sequence = 0;
    return absl::OkStatus();
  }
  // Records after the snapshot: a new file with only them replaces the old.
  PS_ASSIGN_OR_RETURN(std::string contents, ReadWholeFile(log.fd, path));
  size_t valid_end = 0;
  std::vector<std::string> kept;
  int64_t first_kept = 0;
  for (const Frame& frame : ParseFrames(contents, &valid_end)) {
    if (frame.sequence <= sequence) continue;
    if (kept.empty()) first_kept = frame.sequence;
    kept.emplace_back(frame.payload);
  }
  const std::string temporary = absl::StrCat(path, ".tmp");
  const int new_fd =
      open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (new_fd < 0) {
    return Errno(absl::StrCat("update log: creating ", temporary));
  }
  absl::Status status = WriteFrames(new_fd, first_kept, kept, temporary);
  if (status.ok() && sync && fdatasync(new_fd) != 0) {
    status = Errno(absl::StrCat("update log: fdatasync of ", temporary));
  }
  if (status.ok() && rename(temporary.c_str(), path.c_str()) != 0) {
    status = Errno(absl::StrCat("update log: renaming ", temporary));
  }
  if (!status.ok()) {
    close(new_fd);
    return status;
  }
  close(log.fd);
  log.fd = new_fd;
  log.last_sequence = first_kept + static_cast<int64_t>(kept.size()) - 1;
  return sync ? SyncDirectory() : absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<int64_t, std::string>>>
UpdateLogFiles::Read(const std::string& job_id, int64_t after) {
  const std::string path = PathOf(job_id);
  JobLog& log = LogOf(job_id);
  absl::MutexLock lock(&log.mu);
  std::string contents;
  if (log.fd >= 0) {
    PS_ASSIGN_OR_RETURN(contents, ReadWholeFile(log.fd, path));
  } else {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        return std::vector<std::pair<int64_t, std::string>>();
      return Errno(absl::StrCat("update log: opening ", path));
    }
    absl::StatusOr<std::string> read = ReadWholeFile(fd, path);
    close(fd);
    if (!read.ok()) return read.status();
    contents = *std::move(read);
  }
  size_t valid_end = 0;
  std::vector<std::pair<int64_t, std::string>> records;
  for (const Frame& frame : ParseFrames(contents, &valid_end)) {
    if (frame.sequence <= after) continue;
    const int64_t expected =
        records.empty() ? frame.sequence : records.back().first + 1;
    if (frame.sequence != expected) {
      return absl::DataLossError(
          absl::StrCat("update log of job ", job_id, ": record ", expected,
                       " is missing (the next is ", frame.sequence, ")"));
    }
    records.emplace_back(frame.sequence, std::string(frame.payload));
  }
  return records;
}

absl::StatusOr<std::vector<std::string>> UpdateLogFiles::ListJobs() const {
  std::vector<std::string> ids;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, error)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, kSuffix)) continue;
    const std::string hex = name.substr(0, name.size() - strlen(kSuffix));
    std::string id = absl::HexStringToBytes(hex);
    if (absl::BytesToHexString(id) != hex || id.empty()) continue;
    ids.push_back(std::move(id));
  }
  if (error) {
    return absl::InternalError(
        absl::StrCat("update log: listing ", dir_, ": ", error.message()));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

absl::Status UpdateLogFiles::Delete(const std::string& job_id) {
  const std::string path = PathOf(job_id);
  {
    JobLog& log = LogOf(job_id);
    absl::MutexLock lock(&log.mu);
    if (log.fd >= 0) close(log.fd);
    log.fd = -1;
    log.last_sequence = 0;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Errno(absl::StrCat("update log: deleting ", path));
    }
  }
  return SyncDirectory();
}

absl::Status UpdateLogFiles::SyncDirectory() const {
  const int fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(absl::StrCat("update log: opening ", dir_));
  const bool synced = fsync(fd) == 0;
  absl::Status status =
      synced ? absl::OkStatus()
             : Errno(absl::StrCat("update log: fsync of ", dir_));
  close(fd);
  return status;
}

}  // namespace ps

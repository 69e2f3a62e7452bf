#include "server/update_log_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_bytes.h"
#include "common/status_macros.h"
#include "xxhash.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr char kSuffix[] = ".ulog";
// The file header of the current format: frames with a generation.
constexpr char kMagic[] = {'P', 'S', 'U', 'L', 'O', 'G', '\0', '\x02'};
constexpr size_t kMagicBytes = sizeof(kMagic);
constexpr size_t kHeaderBytes = 28;  // size, checksum, sequence, generation
constexpr size_t kFirstFormatHeaderBytes = 20;  // size, checksum, sequence

// XXH3 (64 bits) of a frame's payload, seeded with a hash of its sequence and
// generation, so that a frame moved elsewhere or left by another generation
// fails too: a checksum that keeps up with the disk (RocksDB's CRC32C, as
// Debian builds it, cost 11 % of a server's CPU here).
uint64_t FrameChecksum(int64_t sequence, int64_t generation,
                       absl::string_view payload) {
  char fields[16];
  PutInt64(sequence, fields);
  PutInt64(generation, fields + 8);
  return XXH3_64bits_withSeed(payload.data(), payload.size(),
                              XXH3_64bits(fields, sizeof(fields)));
}

void EncodeHeader(int64_t sequence, int64_t generation,
                  absl::string_view payload, char* header) {
  PutUint32(static_cast<uint32_t>(payload.size()), header);
  PutInt64(static_cast<int64_t>(FrameChecksum(sequence, generation, payload)),
           header + 4);
  PutInt64(sequence, header + 12);
  PutInt64(generation, header + 20);
}

struct Frame {
  int64_t sequence;
  absl::string_view payload;
};

// A file's readable log.
struct ParsedLog {
  bool first_format = false;  // No header: 20-byte frames, no generation.
  std::vector<Frame> frames;
  int64_t generation = 0;  // Of `frames`.
  size_t end = 0;          // Where the readable log ends.
};

// First-format frames: payload size | XXH3-64 of the payload seeded with the
// sequence | sequence | payload.
void ParseFirstFormat(absl::string_view contents, ParsedLog* log) {
  size_t at = 0;
  while (contents.size() - at >= kFirstFormatHeaderBytes) {
    const char* header = contents.data() + at;
    const size_t size = GetUint32(header);
    if (contents.size() - at - kFirstFormatHeaderBytes < size) break;
    const int64_t sequence = GetInt64(header + 12);
    absl::string_view payload =
        contents.substr(at + kFirstFormatHeaderBytes, size);
    if (GetInt64(header + 4) !=
        static_cast<int64_t>(XXH3_64bits_withSeed(
            payload.data(), payload.size(), static_cast<uint64_t>(sequence)))) {
      break;
    }
    log->frames.push_back({sequence, payload});
    at += kFirstFormatHeaderBytes + size;
  }
  log->end = at;
}

ParsedLog ParseLog(absl::string_view contents) {
  ParsedLog log;
  const absl::string_view magic(kMagic, kMagicBytes);
  if (!absl::StartsWith(contents, magic)) {
    // Empty, or a header a crash cut short: a file of this format, empty.
    if (absl::StartsWith(magic, contents)) return log;
    log.first_format = true;
    ParseFirstFormat(contents, &log);
    return log;
  }
  size_t at = kMagicBytes;
  while (contents.size() - at >= kHeaderBytes) {
    const char* header = contents.data() + at;
    const size_t size = GetUint32(header);
    if (contents.size() - at - kHeaderBytes < size) break;
    const int64_t sequence = GetInt64(header + 12);
    const int64_t generation = GetInt64(header + 20);
    if (!log.frames.empty() && generation != log.generation) break;
    absl::string_view payload = contents.substr(at + kHeaderBytes, size);
    char expected[kHeaderBytes];
    EncodeHeader(sequence, generation, payload, expected);
    if (std::memcmp(expected, header, kHeaderBytes) != 0) break;
    log.generation = generation;
    log.frames.push_back({sequence, payload});
    at += kHeaderBytes + size;
  }
  log.end = at;
  return log;
}

absl::StatusOr<std::string> ReadWholeFile(int fd, const std::string& path) {
  std::string contents;
  char buffer[1 << 16];
  off_t offset = 0;
  while (true) {
    const ssize_t n = pread(fd, buffer, sizeof(buffer), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("update log: reading ", path));
    }
    if (n == 0) return contents;
    contents.append(buffer, n);
    offset += n;
  }
}

// Writes the file's magic at its start.
absl::Status WriteMagic(int fd, const std::string& path) {
  return WriteGathered(fd, {{const_cast<char*>(kMagic), kMagicBytes}},
                       /*offset=*/0, "update log", path)
      .status();
}

// Writes `records` as frames of `generation` with sequences first_sequence,
// ... at `offset`, in one pwritev (the payloads are not copied); adds the
// bytes written to `*end`.
absl::Status WriteFrames(int fd, uint64_t offset, int64_t first_sequence,
                         int64_t generation,
                         std::span<const std::string> records,
                         const std::string& path, uint64_t* end) {
  std::vector<std::array<char, kHeaderBytes>> headers(records.size());
  std::vector<iovec> iov;
  iov.reserve(2 * records.size());
  uint64_t bytes = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    EncodeHeader(first_sequence + static_cast<int64_t>(i), generation,
                 records[i], headers[i].data());
    iov.push_back({headers[i].data(), kHeaderBytes});
    if (!records[i].empty()) {
      iov.push_back({const_cast<char*>(records[i].data()), records[i].size()});
    }
    bytes += kHeaderBytes + records[i].size();
  }
  PS_RETURN_IF_ERROR(
      WriteGathered(fd, std::move(iov), offset, "update log", path).status());
  *end = offset + bytes;
  return absl::OkStatus();
}

// Makes the file at `fd` hold only the header, then `records`.
absl::Status WriteFile(int fd, int64_t first_sequence,
                       std::span<const std::string> records,
                       const std::string& path, uint64_t* end) {
  PS_RETURN_IF_ERROR(WriteMagic(fd, path));
  *end = kMagicBytes;
  if (!records.empty()) {
    PS_RETURN_IF_ERROR(WriteFrames(fd, kMagicBytes, first_sequence,
                                   first_sequence, records, path, end));
  }
  if (ftruncate(fd, static_cast<off_t>(*end)) != 0) {
    return ErrnoStatus(absl::StrCat("update log: truncating ", path));
  }
  return absl::OkStatus();
}

// The frames' payloads, or DATA_LOSS unless their sequences follow each other.
absl::StatusOr<std::vector<std::string>> ConsecutivePayloads(
    const std::vector<Frame>& frames, const std::string& job_id) {
  std::vector<std::string> payloads;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i > 0 && frames[i].sequence != frames[i - 1].sequence + 1) {
      return absl::DataLossError(absl::StrCat(
          "update log of job ", job_id, ": record ", frames[i - 1].sequence + 1,
          " is missing (the next is ", frames[i].sequence, ")"));
    }
    payloads.emplace_back(frames[i].payload);
  }
  return payloads;
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
                                           JobLog& log, bool sync) {
  if (log.fd >= 0) return absl::OkStatus();
  const std::string path = PathOf(job_id);
  std::error_code error;
  const bool existed = fs::exists(path, error);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("update log: opening ", path));
  // A new file's name must be durable before a synced record in it is
  // acknowledged: a machine crash could otherwise lose the whole file.
  absl::Status status = existed ? absl::OkStatus() : SyncDirectory();
  absl::StatusOr<std::string> contents =
      status.ok() ? ReadWholeFile(fd, path) : status;
  if (!contents.ok()) {
    close(fd);
    return contents.status();
  }
  const ParsedLog parsed = ParseLog(*contents);
  if (parsed.first_format) {
    close(fd);
    log.appended = false;
    PS_ASSIGN_OR_RETURN(std::vector<std::string> records,
                        ConsecutivePayloads(parsed.frames, job_id));
    return Rewrite(job_id, log,
                   parsed.frames.empty() ? 0 : parsed.frames.front().sequence,
                   records, sync);
  }
  // What follows the readable log (the tail of a write a crash cut short, or
  // frames an earlier generation left) is cut off, so that none of it can
  // follow the frames appended next, even where their sizes line up.
  const uint64_t end = std::max<uint64_t>(parsed.end, kMagicBytes);
  if (parsed.end < kMagicBytes) {
    status = WriteMagic(fd, path);
  }
  if (status.ok() && contents->size() != end) {
    if (ftruncate(fd, static_cast<off_t>(end)) != 0 ||
        (sync && fdatasync(fd) != 0)) {
      status = ErrnoStatus(absl::StrCat("update log: preparing ", path));
    }
  }
  if (!status.ok()) {
    close(fd);
    return status;
  }
  log.fd = fd;
  log.last_sequence = parsed.frames.empty() ? 0 : parsed.frames.back().sequence;
  log.generation = parsed.generation;
  log.end = end;
  log.all_dropped = false;
  log.appended = false;
  return absl::OkStatus();
}

absl::Status UpdateLogFiles::Rewrite(const std::string& job_id, JobLog& log,
                                     int64_t first_sequence,
                                     const std::vector<std::string>& records,
                                     bool sync) {
  const std::string path = PathOf(job_id);
  const std::string temporary = absl::StrCat(path, ".tmp");
  const int new_fd =
      open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (new_fd < 0) {
    return ErrnoStatus(absl::StrCat("update log: creating ", temporary));
  }
  uint64_t end = 0;
  absl::Status status =
      WriteFile(new_fd, first_sequence, records, temporary, &end);
  if (status.ok() && sync && fdatasync(new_fd) != 0) {
    status = ErrnoStatus(absl::StrCat("update log: fdatasync of ", temporary));
  }
  if (status.ok() && rename(temporary.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(absl::StrCat("update log: renaming ", temporary));
  }
  if (!status.ok()) {
    close(new_fd);
    return status;
  }
  if (log.fd >= 0) close(log.fd);
  log.fd = new_fd;
  log.last_sequence =
      records.empty()
          ? 0
          : first_sequence + static_cast<int64_t>(records.size()) - 1;
  log.generation = first_sequence;
  log.end = end;
  log.all_dropped = false;
  return sync ? SyncDirectory() : absl::OkStatus();
}

absl::Status UpdateLogFiles::Append(const std::string& job_id,
                                    int64_t first_sequence,
                                    const std::vector<std::string>& records,
                                    bool sync) {
  JobLog& log = LogOf(job_id);
  absl::MutexLock lock(&log.mu);
  PS_RETURN_IF_ERROR(OpenForAppend(job_id, log, sync));
  if (records.empty()) return absl::OkStatus();
  const bool follows =
      log.last_sequence > 0 && first_sequence == log.last_sequence + 1;
  // A new generation where a snapshot covers everything in the file: after
  // DropThrough, or at a process's first append after a later snapshot
  // (ShardStore::AppendLog: the log continues the last record or snapshot).
  const bool new_generation =
      log.all_dropped || log.last_sequence == 0 ||
      (!follows && !log.appended && first_sequence > log.last_sequence);
  if (!follows && !new_generation) {
    return absl::FailedPreconditionError(
        absl::StrCat("update log of job ", job_id, ": record ", first_sequence,
                     " does not follow record ", log.last_sequence,
                     " and no snapshot dropped the records before it"));
  }
  const std::string path = PathOf(job_id);
  const int64_t generation = new_generation ? first_sequence : log.generation;
  const uint64_t offset = new_generation ? kMagicBytes : log.end;
  uint64_t end = 0;
  PS_RETURN_IF_ERROR(WriteFrames(log.fd, offset, first_sequence, generation,
                                 records, path, &end));
  if (sync && fdatasync(log.fd) != 0) {
    return ErrnoStatus(absl::StrCat("update log: fdatasync of ", path));
  }
  log.last_sequence = first_sequence + static_cast<int64_t>(records.size()) - 1;
  log.generation = generation;
  log.end = end;
  log.all_dropped = false;
  log.appended = true;
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
  PS_RETURN_IF_ERROR(OpenForAppend(job_id, log, sync));
  if (log.last_sequence <= sequence) {
    // Nothing to write: the frames stay until the next generation overwrites
    // them, and a reader skips them (they are <= the snapshot's sequence).
    log.all_dropped = true;
    return absl::OkStatus();
  }
  // Records after the snapshot: a new file with only them replaces the old.
  PS_ASSIGN_OR_RETURN(std::string contents, ReadWholeFile(log.fd, path));
  const ParsedLog parsed = ParseLog(contents);
  std::vector<Frame> later;
  for (const Frame& frame : parsed.frames) {
    if (frame.sequence > sequence) later.push_back(frame);
  }
  if (later.empty()) {
    log.all_dropped = true;
    return absl::OkStatus();
  }
  PS_ASSIGN_OR_RETURN(std::vector<std::string> kept,
                      ConsecutivePayloads(later, job_id));
  return Rewrite(job_id, log, later.front().sequence, kept, sync);
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
      return ErrnoStatus(absl::StrCat("update log: opening ", path));
    }
    absl::StatusOr<std::string> read = ReadWholeFile(fd, path);
    close(fd);
    if (!read.ok()) return read.status();
    contents = *std::move(read);
  }
  std::vector<Frame> frames = ParseLog(contents).frames;
  std::erase_if(frames,
                [after](const Frame& f) { return f.sequence <= after; });
  PS_ASSIGN_OR_RETURN(std::vector<std::string> payloads,
                      ConsecutivePayloads(frames, job_id));
  std::vector<std::pair<int64_t, std::string>> records;
  records.reserve(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    records.emplace_back(frames[i].sequence, std::move(payloads[i]));
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
      return ErrnoStatus(absl::StrCat("update log: deleting ", path));
    }
  }
  return SyncDirectory();
}

absl::Status UpdateLogFiles::Replace(const std::string& job_id,
                                     int64_t first_sequence,
                                     const std::vector<std::string>& records,
                                     bool sync) {
  JobLog& log = LogOf(job_id);
  absl::MutexLock lock(&log.mu);
  return Rewrite(job_id, log, first_sequence, records, sync);
}

absl::StatusOr<bool> UpdateLogFiles::ConvertFirstFormat(
    const std::string& job_id, bool sync) {
  const std::string path = PathOf(job_id);
  JobLog& log = LogOf(job_id);
  absl::MutexLock lock(&log.mu);
  if (log.fd >= 0) return false;  // Opened for appending: converted then.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return ErrnoStatus(absl::StrCat("update log: opening ", path));
  }
  absl::StatusOr<std::string> contents = ReadWholeFile(fd, path);
  close(fd);
  if (!contents.ok()) return contents.status();
  if (!ParseLog(*contents).first_format) return false;
  PS_RETURN_IF_ERROR(OpenForAppend(job_id, log, sync));  // Rewrites it.
  return true;
}

absl::Status UpdateLogFiles::SyncDirectory() const {
  return SyncPath(dir_, O_RDONLY | O_DIRECTORY, "update log");
}

}  // namespace ps

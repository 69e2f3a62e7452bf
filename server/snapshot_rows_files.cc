#include "server/snapshot_rows_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/file_bytes.h"
#include "common/status_macros.h"
// XXH3_state_t on the stack (its size is in the static-linking part).
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = {'P', 'S', 'R', 'O', 'W', 'S', '\0', '\x01'};
constexpr size_t kMagicBytes = sizeof(kMagic);
// An entry's key and size.
constexpr size_t kEntryHeaderBytes = 16;

// Writes `head`, then each of `entries` (its key and size, then its rows),
// then the XXH3-64 of every byte before it, from offset 0 on through a
// block-aligned buffer: with `direct` (a file opened with O_DIRECT) the
// bytes go from the buffer to the device, not through the page cache
// (copying hundreds of MB into fresh page-cache pages cost the writer more
// CPU than RocksDB's whole path had), and the last block is padded with
// zeros (the caller cuts the file to the returned length). Each piece is
// hashed from the buffer right after it is copied there, while it is in
// the cache, rather than in a pass of its own over the rows; an entry is
// asked for only once the one before it is in the buffer, so a streamed
// snapshot holds one bucket's rows at a time. The buffer is the thread's,
// kept from write to write (a job's writer thread writes its snapshots), so
// its pages are not new to the process each time.
absl::StatusOr<uint64_t> WriteBuffered(int fd, bool direct,
                                       std::string_view head,
                                       RowsFileEntries& entries,
                                       const std::string& path) {
  constexpr size_t kBlock = 4096;
  constexpr size_t kBuffer = size_t{4} << 20;
  thread_local std::unique_ptr<char, decltype(&free)> buffer(nullptr, &free);
  if (buffer == nullptr) {
    void* raw = nullptr;
    if (posix_memalign(&raw, kBlock, kBuffer) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("snapshot rows: no buffer to write ", path));
    }
    buffer.reset(static_cast<char*>(raw));
  }
  XXH3_state_t hash;
  XXH3_64bits_reset(&hash);
  size_t fill = 0;
  uint64_t offset = 0;
  uint64_t total = 0;
  const auto flush = [&](size_t bytes) -> absl::Status {
    size_t done = 0;
    while (done < bytes) {
      const ssize_t n = pwrite(fd, buffer.get() + done, bytes - done,
                               static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 ||
          (direct && static_cast<size_t>(n) < bytes - done && n % kBlock)) {
        return ErrnoStatus(absl::StrCat("snapshot rows: writing ", path));
      }
      done += static_cast<size_t>(n);
    }
    offset += bytes;
    return absl::OkStatus();
  };
  const auto put = [&](const char* from, size_t left,
                       bool hashed) -> absl::Status {
    total += left;
    while (left > 0) {
      const size_t take = std::min(left, kBuffer - fill);
      std::memcpy(buffer.get() + fill, from, take);
      if (hashed) XXH3_64bits_update(&hash, buffer.get() + fill, take);
      fill += take;
      from += take;
      left -= take;
      if (fill == kBuffer) {
        PS_RETURN_IF_ERROR(flush(kBuffer));
        fill = 0;
      }
    }
    return absl::OkStatus();
  };
  PS_RETURN_IF_ERROR(put(head.data(), head.size(), true));
  for (uint64_t i = 0, n = entries.count(); i < n; ++i) {
    PS_ASSIGN_OR_RETURN(const RowsFileEntry entry, entries.Next());
    char entry_head[kEntryHeaderBytes];
    PutUint64(entry.key, entry_head);
    PutUint64(entry.rows.size(), entry_head + 8);
    PS_RETURN_IF_ERROR(put(entry_head, sizeof(entry_head), true));
    PS_RETURN_IF_ERROR(put(entry.rows.data(), entry.rows.size(), true));
  }
  char sum[8];
  PutUint64(XXH3_64bits_digest(&hash), sum);
  PS_RETURN_IF_ERROR(put(sum, sizeof(sum), false));
  if (fill > 0) {
    const size_t padded = direct ? (fill + kBlock - 1) / kBlock * kBlock : fill;
    std::memset(buffer.get() + fill, 0, padded - fill);
    PS_RETURN_IF_ERROR(flush(padded));
  }
  return total;
}

// A span of entries as RowsFileEntries.
class SpanEntries final : public RowsFileEntries {
 public:
  explicit SpanEntries(std::span<const RowsFileEntry> entries)
      : entries_(entries) {}
  uint64_t count() const override { return entries_.size(); }
  absl::StatusOr<RowsFileEntry> Next() override { return entries_[next_++]; }

 private:
  const std::span<const RowsFileEntry> entries_;
  size_t next_ = 0;
};

// Reads exactly `size` bytes at `*offset` into `out`, advancing `*offset`;
// false when the file ends first.
absl::StatusOr<bool> ReadExactly(int fd, char* out, size_t size,
                                 uint64_t* offset, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n =
        pread(fd, out + done, size - done, static_cast<off_t>(*offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("snapshot rows: reading ", path));
    }
    if (n == 0) return false;
    done += static_cast<size_t>(n);
  }
  *offset += size;
  return true;
}

// Reads one job's rows file, checking it as it goes.
class RowsFileReader {
 public:
  RowsFileReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
    XXH3_64bits_reset(&hash_);
  }

  absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>> Read(
      const std::string& job_id, uint64_t number) {
    struct stat st {};
    if (fstat(fd_, &st) != 0) {
      return ErrnoStatus(absl::StrCat("snapshot rows: stat of ", path_));
    }
    const auto file_bytes = static_cast<uint64_t>(st.st_size);
    char head[kMagicBytes + 12];
    PS_RETURN_IF_ERROR(Take(head, sizeof(head)));
    if (std::memcmp(head, kMagic, kMagicBytes) != 0) {
      return Loss("has no rows-file header");
    }
    if (GetUint64(head + kMagicBytes) != number) {
      return Loss(absl::StrCat("holds snapshot rows ",
                               GetUint64(head + kMagicBytes), ", not ",
                               number));
    }
    uint32_t id_bytes = 0;
    for (int i = 0; i < 4; ++i) {
      id_bytes |= uint32_t{static_cast<uint8_t>(head[kMagicBytes + 8 + i])}
                  << (8 * i);
    }
    if (id_bytes != job_id.size()) return Loss("belongs to another job");
    std::string id(id_bytes, '\0');
    char count_bytes[8];
    PS_RETURN_IF_ERROR(Take(id.data(), id.size()));
    PS_RETURN_IF_ERROR(Take(count_bytes, sizeof(count_bytes)));
    if (id != job_id) return Loss("belongs to another job");
    const uint64_t count = GetUint64(count_bytes);
    std::vector<std::pair<uint64_t, std::string>> entries;
    for (uint64_t i = 0; i < count; ++i) {
      char entry[kEntryHeaderBytes];
      PS_RETURN_IF_ERROR(Take(entry, sizeof(entry)));
      const uint64_t size = GetUint64(entry + 8);
      if (size == 0 || size > file_bytes - offset_) {
        return Loss(absl::StrCat("entry ", i, " of ", size,
                                 " bytes is empty or runs past the end"));
      }
      std::string rows(size, '\0');
      PS_RETURN_IF_ERROR(Take(rows.data(), rows.size()));
      entries.emplace_back(GetUint64(entry), std::move(rows));
    }
    const uint64_t expected = XXH3_64bits_digest(&hash_);
    char sum[8];
    PS_ASSIGN_OR_RETURN(bool whole,
                        ReadExactly(fd_, sum, sizeof(sum), &offset_, path_));
    if (!whole) return Loss("is cut short");
    if (GetUint64(sum) != expected) return Loss("fails its checksum");
    return entries;
  }

 private:
  absl::Status Loss(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat("snapshot rows file ", path_, " ", what));
  }
  // Reads `size` bytes into `out` and adds them to the checksum.
  absl::Status Take(char* out, size_t size) {
    PS_ASSIGN_OR_RETURN(bool whole,
                        ReadExactly(fd_, out, size, &offset_, path_));
    if (!whole) return Loss("is cut short");
    XXH3_64bits_update(&hash_, out, size);
    return absl::OkStatus();
  }

  const int fd_;
  const std::string path_;
  uint64_t offset_ = 0;
  XXH3_state_t hash_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotRowsFiles>> SnapshotRowsFiles::Open(
    std::string dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("snapshot rows: cannot create ",
                                            dir, ": ", error.message()));
  }
  return std::unique_ptr<SnapshotRowsFiles>(
      new SnapshotRowsFiles(std::move(dir)));
}

std::string SnapshotRowsFiles::PathOf(const std::string& job_id,
                                      uint64_t number) const {
  return absl::StrCat(dir_, "/", absl::BytesToHexString(job_id), ".rows",
                      number % 2);
}

absl::Status SnapshotRowsFiles::Write(const std::string& job_id,
                                      uint64_t number,
                                      std::span<const RowsFileEntry> entries,
                                      bool sync) const {
  SpanEntries source(entries);
  return Write(job_id, number, source, sync);
}

absl::Status SnapshotRowsFiles::Write(const std::string& job_id,
                                      uint64_t number, RowsFileEntries& entries,
                                      bool sync) const {
  const std::string path = PathOf(job_id, number);
  std::error_code error;
  const bool existed = fs::exists(path, error);
  // Written in place (no O_TRUNC: the file's blocks are reused), cut to its
  // length after; with O_DIRECT, or through the page cache on a file system
  // that refuses it.
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
  bool direct = true;
  int fd = open(path.c_str(), flags | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {
    direct = false;
    fd = open(path.c_str(), flags, 0644);
  }
  if (fd < 0) return ErrnoStatus(absl::StrCat("snapshot rows: opening ", path));
  std::string head(kMagic, kMagicBytes);
  head.resize(kMagicBytes + 12);
  PutUint64(number, head.data() + kMagicBytes);
  const auto id_bytes = static_cast<uint32_t>(job_id.size());
  for (int i = 0; i < 4; ++i) {
    head[kMagicBytes + 8 + i] = static_cast<char>(id_bytes >> (8 * i));
  }
  head += job_id;
  head.resize(head.size() + 8);
  PutUint64(entries.count(), head.data() + head.size() - 8);
  const absl::StatusOr<uint64_t> written =
      WriteBuffered(fd, direct, head, entries, path);
  absl::Status status = written.status();
  if (status.ok() && ftruncate(fd, static_cast<off_t>(*written)) != 0) {
    status = ErrnoStatus(absl::StrCat("snapshot rows: truncating ", path));
  }
  if (status.ok() && sync && fdatasync(fd) != 0) {
    status = ErrnoStatus(absl::StrCat("snapshot rows: fdatasync of ", path));
  }
  close(fd);
  if (status.ok() && sync && !existed) status = SyncDirectory();
  return status;
}

absl::StatusOr<std::vector<std::pair<uint64_t, std::string>>>
SnapshotRowsFiles::Read(const std::string& job_id, uint64_t number) const {
  const std::string path = PathOf(job_id, number);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::DataLossError(absl::StrCat("snapshot rows file ", path,
                                              " of snapshot rows ", number,
                                              " is missing"));
    }
    return ErrnoStatus(absl::StrCat("snapshot rows: opening ", path));
  }
  RowsFileReader reader(fd, path);
  auto entries = reader.Read(job_id, number);
  close(fd);
  return entries;
}

absl::Status SnapshotRowsFiles::Delete(const std::string& job_id) const {
  for (uint64_t slot = 0; slot < 2; ++slot) {
    const std::string path = PathOf(job_id, slot);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(absl::StrCat("snapshot rows: deleting ", path));
    }
  }
  return absl::OkStatus();
}

absl::Status SnapshotRowsFiles::SyncDirectory() const {
  return SyncPath(dir_, O_RDONLY | O_DIRECTORY, "snapshot rows");
}

}  // namespace ps

// Reading a text data file, plain or gzip-compressed: whole (the CSV and
// libsvm readers) or in chunks (the Criteo reader).
#ifndef PS_COMMON_TEXT_FILE_H_
#define PS_COMMON_TEXT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

struct gzFile_s;  // zlib's file handle.

namespace ps {

// Largest text data file ReadTextFile reads (after decompression): 4 GiB.
inline constexpr int64_t kMaxTextFileBytes = int64_t{4} << 30;

// A text data file read in chunks, gzip-compressed or plain (zlib tells
// which). Movable, not thread-safe.
class TextFileReader {
 public:
  // Opens `path`. Errors: NOT_FOUND naming the path for a missing file;
  // another code naming it for other failures.
  static absl::StatusOr<TextFileReader> Open(const std::string& path);

  // Reads up to `size` bytes (decompressed) into `buffer`: the count read,
  // 0 only at the end of the file. Errors: DATA_LOSS naming the path for a
  // corrupt or truncated gzip stream; another code for other I/O failures.
  absl::StatusOr<size_t> Read(char* buffer, size_t size);

  const std::string& path() const { return path_; }
  // The file's size on disk (compressed, for a gzip file) when it opened,
  // and how much of it the reads so far have used: their ratio tells how
  // far through the file they are.
  int64_t size_on_disk() const { return size_on_disk_; }
  int64_t bytes_used() const;

 private:
  struct Closer {
    void operator()(gzFile_s* file) const;
  };
  TextFileReader(std::string path, gzFile_s* file, int64_t size_on_disk)
      : path_(std::move(path)), file_(file), size_on_disk_(size_on_disk) {}

  std::string path_;
  std::unique_ptr<gzFile_s, Closer> file_;
  int64_t size_on_disk_;
};

// The contents of `path` (gzip-compressed or plain; zlib tells which).
// Thread-safe. Errors: TextFileReader's (NOT_FOUND naming the path for a
// missing file; DATA_LOSS for a corrupt or truncated gzip stream);
// RESOURCE_EXHAUSTED past kMaxTextFileBytes.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace ps

#endif  // PS_COMMON_TEXT_FILE_H_

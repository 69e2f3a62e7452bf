// Reading a whole text data file, plain or gzip-compressed, for the CSV and
// libsvm readers.
#ifndef PS_COMMON_TEXT_FILE_H_
#define PS_COMMON_TEXT_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ps {

// Largest text data file read (after decompression): 4 GiB.
inline constexpr int64_t kMaxTextFileBytes = int64_t{4} << 30;

// The contents of `path` (gzip-compressed or plain; zlib tells which).
// Thread-safe. Errors: NOT_FOUND naming the path for a missing file;
// DATA_LOSS for a corrupt gzip stream; RESOURCE_EXHAUSTED past
// kMaxTextFileBytes; another code for other I/O failures.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace ps

#endif  // PS_COMMON_TEXT_FILE_H_

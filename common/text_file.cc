#include "common/text_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {

void TextFileReader::Closer::operator()(gzFile_s* file) const { gzclose(file); }

absl::StatusOr<TextFileReader> TextFileReader::Open(const std::string& path) {
  errno = 0;
  gzFile_s* file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    if (err != 0) return absl::ErrnoToStatus(err, path);
    return absl::InternalError(absl::StrCat(path, ": gzopen failed"));
  }
  gzbuffer(file, 1 << 18);
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return TextFileReader(path, file, error ? 0 : static_cast<int64_t>(size));
}

int64_t TextFileReader::bytes_used() const { return gzoffset(file_.get()); }

absl::StatusOr<size_t> TextFileReader::Read(char* buffer, size_t size) {
  const unsigned want =
      static_cast<unsigned>(std::min<size_t>(size, INT_MAX / 2));
  const int got = gzread(file_.get(), buffer, want);
  if (got > 0) return static_cast<size_t>(got);
  int code = Z_OK;
  const char* msg = gzerror(file_.get(), &code);
  // zlib reports a gzip stream cut short (Z_BUF_ERROR) as the end of the
  // file, with the error set.
  if (got == 0 && code != Z_BUF_ERROR) return size_t{0};
  if (code == Z_ERRNO) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path_, ": read failed"));
  }
  return absl::DataLossError(absl::StrCat(path_, ": ", msg));
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  auto file = TextFileReader::Open(path);
  if (!file.ok()) return file.status();
  std::string text;
  constexpr size_t kChunk = 1 << 20;
  while (true) {
    const size_t old = text.size();
    text.resize(old + kChunk);
    auto got = file->Read(text.data() + old, kChunk);
    if (!got.ok()) return got.status();
    text.resize(old + *got);
    if (*got == 0) break;
    if (static_cast<int64_t>(text.size()) > kMaxTextFileBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": larger than ", kMaxTextFileBytes, " bytes"));
    }
  }
  return text;
}

}  // namespace ps

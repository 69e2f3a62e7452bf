#include "common/text_file.h"

#include <zlib.h>

#include <cerrno>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    if (err != 0) return absl::ErrnoToStatus(err, path);
    return absl::InternalError(absl::StrCat(path, ": gzopen failed"));
  }
  gzbuffer(f.get(), 1 << 18);
  std::string text;
  constexpr int kChunk = 1 << 20;
  while (true) {
    const size_t old = text.size();
    text.resize(old + kChunk);
    const int got = gzread(f.get(), text.data() + old, kChunk);
    if (got < 0) {
      int code = Z_OK;
      const char* msg = gzerror(f.get(), &code);
      if (code == Z_ERRNO) {
        return absl::ErrnoToStatus(errno, absl::StrCat(path, ": read failed"));
      }
      return absl::DataLossError(absl::StrCat(path, ": ", msg));
    }
    text.resize(old + got);
    if (got == 0) break;
    if (static_cast<int64_t>(text.size()) > kMaxTextFileBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": larger than ", kMaxTextFileBytes, " bytes"));
    }
  }
  return text;
}

}  // namespace ps

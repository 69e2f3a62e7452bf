#include "common/shared_region.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace ps {
namespace {

constexpr absl::string_view kPrefix = "ps-shm-";
constexpr size_t kRandomDigits = 16;

std::string ErrnoText(int error) { return std::strerror(error); }

// The pid in a region's name; 0 if the name is not a region's.
pid_t CreatorOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPrefix)) return 0;
  const size_t dash = name.find('-');
  if (dash == absl::string_view::npos) return 0;
  const absl::string_view random = name.substr(dash + 1);
  if (random.size() != kRandomDigits) return 0;
  for (char c : random) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return 0;
  }
  const absl::string_view digits = name.substr(0, dash);
  if (digits.empty() || digits.size() > 9) return 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(c)) return 0;
  }
  int pid = 0;
  if (!absl::SimpleAtoi(digits, &pid) || pid <= 0) return 0;
  return pid;
}

absl::StatusOr<char*> Map(int fd, size_t size, absl::string_view name) {
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("shared region ", name, ": mmap: ", ErrnoText(errno)));
  }
  return static_cast<char*>(data);
}

}  // namespace

bool SharedRegion::IsRegionName(absl::string_view name) {
  return CreatorOf(name) != 0;
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    size_t size) {
  if (size == 0) return absl::InvalidArgumentError("shared region: size 0");
  thread_local std::mt19937_64 random{std::random_device{}()};
  for (int attempt = 0;; ++attempt) {
    std::string name = absl::StrFormat("%s%d-%016x", kPrefix, getpid(),
                                       static_cast<uint64_t>(random()));
    const std::string path = absl::StrCat("/", name);
    const int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      if (errno == EEXIST && attempt < 3) continue;
      return absl::InternalError(absl::StrCat(
          "shared region ", name, ": shm_open: ", ErrnoText(errno)));
    }
    // posix_fallocate reserves the pages now: a full /dev/shm is an error
    // here, not a SIGBUS when the region is first written.
    if (const int error = posix_fallocate(fd, 0, static_cast<off_t>(size));
        error != 0) {
      close(fd);
      shm_unlink(path.c_str());
      const std::string message = absl::StrCat(
          "shared region ", name, " of ", size, " bytes: ", ErrnoText(error));
      return error == ENOSPC ? absl::ResourceExhaustedError(message)
                             : absl::InternalError(message);
    }
    absl::StatusOr<char*> data = Map(fd, size, name);
    close(fd);
    if (!data.ok()) {
      shm_unlink(path.c_str());
      return data.status();
    }
    return std::unique_ptr<SharedRegion>(
        new SharedRegion(std::move(name), *data, size, /*owner=*/true));
  }
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Open(
    absl::string_view name) {
  if (!IsRegionName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\" is not a shared region's name"));
  }
  const std::string path = absl::StrCat("/", name);
  const int fd = shm_open(path.c_str(), O_RDWR | O_NOFOLLOW, 0);
  if (fd < 0) {
    const std::string message =
        absl::StrCat("shared region ", name, ": ", ErrnoText(errno));
    return errno == ENOENT ? absl::NotFoundError(message)
                           : absl::FailedPreconditionError(message);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      st.st_size <= 0) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "shared region ", name, ": not a non-empty file of this user"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  absl::StatusOr<char*> data = Map(fd, size, name);
  close(fd);
  if (!data.ok()) return data.status();
  return std::unique_ptr<SharedRegion>(
      new SharedRegion(std::string(name), *data, size, /*owner=*/false));
}

SharedRegion::~SharedRegion() {
  munmap(data_, size_);
  if (owner_) shm_unlink(absl::StrCat("/", name_).c_str());
}

int SharedRegion::RemoveOrphanedRegions() {
  int removed = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/dev/shm", error)) {
    const std::string name = entry.path().filename().string();
    const pid_t creator = CreatorOf(name);
    if (creator == 0) continue;
    // ESRCH: no such process. (EPERM means it runs, as another user.)
    if (kill(creator, 0) == 0 || errno != ESRCH) continue;
    if (shm_unlink(absl::StrCat("/", name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace ps

// SharedRegion: real POSIX shared memory in /dev/shm.
#include "common/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

bool Exists(const std::string& name) {
  return std::filesystem::exists(std::filesystem::path("/dev/shm") / name);
}

TEST(SharedRegionTest, AnotherMappingSeesTheSameBytes) {
  auto region = SharedRegion::Create(10000);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->size(), 10000u);
  EXPECT_TRUE(SharedRegion::IsRegionName((*region)->name()));
  EXPECT_EQ((*region)->data()[9999], 0);  // Zero-filled.
  std::memcpy((*region)->data() + 100, "payload", 7);

  auto opened = SharedRegion::Open((*region)->name());
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), 10000u);
  EXPECT_EQ(std::string((*opened)->data() + 100, 7), "payload");
  std::memcpy((*opened)->data(), "reply", 5);
  EXPECT_EQ(std::string((*region)->data(), 5), "reply");
}

TEST(SharedRegionTest, TheCreatorRemovesItsRegionAndOthersKeepTheirMapping) {
  auto region = SharedRegion::Create(4096);
  ASSERT_TRUE(region.ok());
  const std::string name = (*region)->name();
  auto opened = SharedRegion::Open(name);
  ASSERT_TRUE(opened.ok());
  opened->reset();  // Not the creator: the name stays.
  EXPECT_TRUE(Exists(name));
  opened = SharedRegion::Open(name);
  ASSERT_TRUE(opened.ok());
  region->reset();
  EXPECT_FALSE(Exists(name));
  // The other mapping is still readable and writable.
  (*opened)->data()[4095] = 7;
  EXPECT_EQ((*opened)->data()[4095], 7);
  EXPECT_TRUE(absl::IsNotFound(SharedRegion::Open(name).status()));
}

TEST(SharedRegionTest, RefusesNamesThatAreNotRegions) {
  for (const char* name :
       {"", "ps-shm-", "ps-shm-12", "ps-shm-12-0123",
        "ps-shm-x-0123456789abcdef", "ps-shm-12-0123456789ABCDEF",
        "../ps-shm-12-0123456789abcdef", "ps-shm-12-0123456789abcdef/x",
        "ps-shm-0-0123456789abcdef", "other-12-0123456789abcdef"}) {
    EXPECT_FALSE(SharedRegion::IsRegionName(name)) << name;
    EXPECT_TRUE(absl::IsInvalidArgument(SharedRegion::Open(name).status()))
        << name;
  }
  EXPECT_TRUE(SharedRegion::IsRegionName("ps-shm-12-0123456789abcdef"));
  EXPECT_TRUE(absl::IsNotFound(
      SharedRegion::Open("ps-shm-12-0123456789abcdef").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SharedRegion::Create(0).status()));
}

TEST(SharedRegionTest, RemovesTheRegionsOfProcessesThatExited) {
  // A child creates a region and exits without removing it (as kill -9
  // would leave it).
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string name =
        absl::StrCat("ps-shm-", getpid(), "-00000000000000aa");
    const int fd = shm_open(absl::StrCat("/", name).c_str(),
                            O_RDWR | O_CREAT | O_EXCL, 0600);
    const bool made = fd >= 0 && ftruncate(fd, 64) == 0;
    const char answer = made ? 1 : 0;
    (void)!write(pipe_fds[1], &answer, 1);
    _exit(0);
  }
  char made = 0;
  ASSERT_EQ(read(pipe_fds[0], &made, 1), 1);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  ASSERT_EQ(made, 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string orphan =
      absl::StrCat("ps-shm-", child, "-00000000000000aa");
  ASSERT_TRUE(Exists(orphan));

  auto mine = SharedRegion::Create(64);  // This process runs: kept.
  ASSERT_TRUE(mine.ok());
  EXPECT_GE(SharedRegion::RemoveOrphanedRegions(), 1);
  EXPECT_FALSE(Exists(orphan));
  EXPECT_TRUE(Exists((*mine)->name()));
}

}  // namespace
}  // namespace ps

#include "server/update_log_files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

class UpdateLogFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/update_log_files_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<UpdateLogFiles> Open() {
    auto files = UpdateLogFiles::Open(dir_ + "/log");
    EXPECT_TRUE(files.ok()) << files.status();
    return files.ok() ? *std::move(files) : nullptr;
  }
  std::string FileOf(const std::string& job) const {
    return dir_ + "/log/" + absl::BytesToHexString(job) + ".ulog";
  }
  uintmax_t SizeOf(const std::string& job) const {
    return std::filesystem::file_size(FileOf(job));
  }

  std::string dir_;
};

TEST_F(UpdateLogFilesTest, RecordsReadBackInOrderAfterAGivenSequence) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"a", "b"}, false).ok());
  ASSERT_TRUE(files->Append("job", 3, {std::string("x\0y", 3), ""}, true).ok());
  auto all = files->Read("job", 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(*all, ElementsAre(Pair(1, "a"), Pair(2, "b"),
                                Pair(3, std::string("x\0y", 3)), Pair(4, "")));
  auto later = files->Read("job", 2);
  ASSERT_TRUE(later.ok());
  EXPECT_THAT(*later,
              ElementsAre(Pair(3, std::string("x\0y", 3)), Pair(4, "")));
  auto none = files->Read("other", 0);
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(*none, IsEmpty());
}

TEST_F(UpdateLogFilesTest, ATornTailIsIgnoredAndCutOffByTheNextAppend) {
  {
    auto files = Open();
    ASSERT_TRUE(files->Append("job", 1, {"first", "second"}, false).ok());
  }
  // A crash in the middle of the next write: half a frame at the end.
  const uintmax_t complete = SizeOf("job");
  {
    std::ofstream out(FileOf("job"), std::ios::app | std::ios::binary);
    out << std::string(10, '\x07');
  }
  auto files = Open();
  auto read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(1, "first"), Pair(2, "second")));
  ASSERT_TRUE(files->Append("job", 3, {"third"}, false).ok());
  EXPECT_EQ(SizeOf("job"), complete + 20 + 5);
  read = files->Read("job", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_THAT(*read, ElementsAre(Pair(1, "first"), Pair(2, "second"),
                                 Pair(3, "third")));
}

TEST_F(UpdateLogFilesTest, AFrameFailingItsChecksumEndsTheReadableLog) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"aaaa", "bbbb", "cccc"}, false).ok());
  // Flip a byte of record 2's payload (frames are 20 + 4 bytes).
  {
    std::fstream file(FileOf("job"),
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(24 + 20 + 1);
    file.put('X');
  }
  auto read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(1, "aaaa")));
}

TEST_F(UpdateLogFilesTest, AGapIsDataLossNamingTheMissingRecord) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"a"}, false).ok());
  ASSERT_TRUE(files->Append("job", 3, {"c"}, false).ok());
  auto read = files->Read("job", 0);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("record 2"));
}

TEST_F(UpdateLogFilesTest,
       DroppingEverythingEmptiesTheFileAndLaterRecordsStay) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"r1", "r2", "r3"}, false).ok());
  ASSERT_TRUE(files->DropThrough("job", 3, /*sync=*/true).ok());
  EXPECT_EQ(SizeOf("job"), 0u);
  ASSERT_TRUE(files->Append("job", 4, {"r4", "r5", "r6"}, false).ok());
  // A snapshot at 5 keeps record 6 (rewritten into a new file).
  ASSERT_TRUE(files->DropThrough("job", 5, /*sync=*/true).ok());
  EXPECT_EQ(SizeOf("job"), 20u + 2);
  ASSERT_TRUE(files->Append("job", 7, {"r7"}, false).ok());
  auto read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(6, "r6"), Pair(7, "r7")));
  // After a reopen, too.
  files = Open();
  read = files->Read("job", 5);
  ASSERT_TRUE(read.ok());
  EXPECT_THAT(*read, ElementsAre(Pair(6, "r6"), Pair(7, "r7")));
}

TEST_F(UpdateLogFilesTest, JobsAreListedByIdAndDeleted) {
  auto files = Open();
  const std::string odd("a/b\x01", 4);  // Any id is a safe file name.
  ASSERT_TRUE(files->Append("job-2", 1, {"x"}, false).ok());
  ASSERT_TRUE(files->Append(odd, 1, {"y"}, false).ok());
  auto jobs = files->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(*jobs, ElementsAre(odd, "job-2"));
  ASSERT_TRUE(files->Delete("job-2").ok());
  ASSERT_TRUE(files->Delete("never-logged").ok());
  jobs = files->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_THAT(*jobs, ElementsAre(odd));
  auto read = files->Read("job-2", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_THAT(*read, IsEmpty());
}

}  // namespace
}  // namespace ps

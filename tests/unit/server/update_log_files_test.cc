#include "server/update_log_files.h"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "xxhash.h"

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
  void Overwrite(const std::string& job, std::streamoff at,
                 const std::string& bytes) const {
    std::fstream file(FileOf(job),
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(at);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // A frame of the first format: size | XXH3-64 of the payload seeded with
  // the sequence | sequence | payload, little-endian.
  static std::string FirstFormatFrame(int64_t sequence,
                                      const std::string& payload) {
    std::string frame;
    auto put = [&frame](uint64_t v, int bytes) {
      for (int i = 0; i < bytes; ++i)
        frame.push_back(static_cast<char>(v >> (8 * i)));
    };
    put(payload.size(), 4);
    put(XXH3_64bits_withSeed(payload.data(), payload.size(),
                             static_cast<uint64_t>(sequence)),
        8);
    put(static_cast<uint64_t>(sequence), 8);
    return frame + payload;
  }

  static constexpr uintmax_t kMagic = 8;    // The file's header.
  static constexpr uintmax_t kHeader = 28;  // A frame's.

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
  EXPECT_EQ(SizeOf("job"), complete + kHeader + 5);
  read = files->Read("job", 0);
  ASSERT_TRUE(read.ok());
  EXPECT_THAT(*read, ElementsAre(Pair(1, "first"), Pair(2, "second"),
                                 Pair(3, "third")));
}

TEST_F(UpdateLogFilesTest, AFrameFailingItsChecksumEndsTheReadableLog) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"aaaa", "bbbb", "cccc"}, false).ok());
  // Flip a byte of record 2's payload (frames are 28 + 4 bytes).
  Overwrite("job", kMagic + 32 + kHeader + 1, "X");
  auto read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(1, "aaaa")));
}

TEST_F(UpdateLogFilesTest, AGapWithinAGenerationIsRefused) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"a"}, false).ok());
  absl::Status gap = files->Append("job", 3, {"c"}, false);
  EXPECT_EQ(gap.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(gap.message(), HasSubstr("record 3 does not follow record 1"));
  auto read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(1, "a")));
}

TEST_F(UpdateLogFilesTest,
       AfterADropTheNextRecordsOverwriteTheFileFromItsStart) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"r1", "r2", "r3"}, false).ok());
  const uintmax_t size = SizeOf("job");
  ASSERT_TRUE(files->DropThrough("job", 3, /*sync=*/true).ok());
  EXPECT_EQ(SizeOf("job"), size);  // Kept, to be written over.
  // Records 1-3 are still readable until overwritten; callers read after
  // the snapshot that dropped them.
  auto read = files->Read("job", 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, IsEmpty());
  ASSERT_TRUE(files->Append("job", 4, {"r4"}, false).ok());
  EXPECT_EQ(SizeOf("job"), size);
  read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  // Records 2 and 3 of the old generation follow 4 in the file, unread.
  EXPECT_THAT(*read, ElementsAre(Pair(4, "r4")));
  ASSERT_TRUE(files->Append("job", 5, {"r5", "r6", "r7"}, false).ok());
  EXPECT_EQ(SizeOf("job"), size + kHeader + 2);
  files = Open();
  read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(4, "r4"), Pair(5, "r5"), Pair(6, "r6"),
                                 Pair(7, "r7")));
}

TEST_F(UpdateLogFilesTest, DroppingSomeRecordsRewritesTheFileWithTheRest) {
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 1, {"r1", "r2", "r3"}, false).ok());
  // A snapshot at 2 keeps record 3 (rewritten into a new file).
  ASSERT_TRUE(files->DropThrough("job", 2, /*sync=*/true).ok());
  EXPECT_EQ(SizeOf("job"), kMagic + kHeader + 2);
  ASSERT_TRUE(files->Append("job", 4, {"r4"}, false).ok());
  auto read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(3, "r3"), Pair(4, "r4")));
  // After a reopen, too.
  files = Open();
  read = files->Read("job", 2);
  ASSERT_TRUE(read.ok());
  EXPECT_THAT(*read, ElementsAre(Pair(3, "r3"), Pair(4, "r4")));
}

// A machine crash can persist some frames of a write and not others: here the
// new generation's first frame is torn and the frames after it (never
// acknowledged) made it to disk. They must not come back behind the record
// that the restarted server writes in the torn one's place, though it has the
// same size and sequence.
TEST_F(UpdateLogFilesTest, FramesBehindATornOneNeverFollowANewRecord) {
  {
    auto files = Open();
    ASSERT_TRUE(files->Append("job", 1, {"r1", "r2", "r3"}, false).ok());
    ASSERT_TRUE(files->DropThrough("job", 3, /*sync=*/false).ok());
    ASSERT_TRUE(files->Append("job", 4, {"r4", "r5", "r6"}, false).ok());
  }
  Overwrite("job", kMagic + kHeader, "XX");  // Record 4's payload.
  auto files = Open();
  auto read = files->Read("job", 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, IsEmpty());
  ASSERT_TRUE(files->Append("job", 4, {"R4"}, /*sync=*/true).ok());
  EXPECT_EQ(SizeOf("job"), kMagic + kHeader + 2);
  for (int reopen = 0; reopen < 2; ++reopen) {
    read = files->Read("job", 3);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_THAT(*read, ElementsAre(Pair(4, "R4")));
    files = Open();
  }
}

// A restarted server whose snapshot is past every record in the file (a
// machine crash kept an older generation's frames) starts a new generation.
TEST_F(UpdateLogFilesTest, AFirstAppendAfterALaterSnapshotStartsAGeneration) {
  {
    auto files = Open();
    ASSERT_TRUE(files->Append("job", 1, {"r1", "r2"}, false).ok());
  }
  auto files = Open();
  ASSERT_TRUE(files->Append("job", 9, {"r9"}, false).ok());
  auto read = files->Read("job", 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(9, "r9")));
  // Overlapping what the file holds is refused.
  files = Open();
  EXPECT_EQ(files->Append("job", 9, {"again"}, false).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Files written before generations (no header, 20-byte frames) are read as
// they are and rewritten in the current format by their first append.
TEST_F(UpdateLogFilesTest, FirstFormatFilesAreReadAndRewrittenOnAppend) {
  std::filesystem::create_directories(dir_ + "/log");
  {
    std::ofstream out(FileOf("job"), std::ios::binary);
    for (int64_t sequence : {5, 6}) {
      const std::string payload = "old" + std::to_string(sequence);
      out << FirstFormatFrame(sequence, payload);
    }
    out << std::string(7, '\x07');  // A torn tail.
  }
  auto files = Open();
  auto read = files->Read("job", 4);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(5, "old5"), Pair(6, "old6")));
  ASSERT_TRUE(files->Append("job", 7, {"new7"}, true).ok());
  EXPECT_EQ(SizeOf("job"), kMagic + 3 * (kHeader + 4));
  files = Open();
  read = files->Read("job", 5);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(Pair(6, "old6"), Pair(7, "new7")));
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

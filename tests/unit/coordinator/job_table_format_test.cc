// The job table's data directory format versions (docs/durability.md,
// "Format versions"): a new table records the current version; a directory of
// a version this build does not know, or of another kind, is refused before
// anything in it changes; and a table of each earlier layout (format version
// 1: with the kind marker, and the first tables without it), written here
// with RocksDB directly, opens, upgrades and keeps its jobs.
#include <rocksdb/db.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data_dir_format.h"
#include "coordinator/job_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kCurrentRecord[] = "ps-coordinator-job-table 2\n";

class JobTableFormatTest : public ::testing::Test {
 protected:
  // Writes `puts` into a RocksDB database at path_ with RocksDB directly, as
  // the job table of an earlier layout did.
  void WriteRaw(const std::vector<std::pair<std::string, std::string>>& puts) {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    rocksdb::Status status = rocksdb::DB::Open(options, path_, &db);
    ASSERT_TRUE(status.ok()) << status.ToString();
    for (const auto& [key, value] : puts) {
      EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
    }
    EXPECT_TRUE(db->Close().ok());
    delete db;
  }

  std::string FormatRecord() const {
    return testing::ReadFileBytes(path_ + "/" + kDataDirFormatFile);
  }

  // One ended job with a model, under the keys every layout used.
  static std::vector<std::pair<std::string, std::string>> AJobAndItsModel() {
    v1::JobStatus job;
    job.set_job_id("job-000001");
    job.set_state(v1::JobState::SUCCEEDED);
    job.set_message("done");
    v1::TrainedModel model;
    model.set_job_id("job-000001");
    model.set_clock(12);
    return {{"job/job-000001", job.SerializeAsString()},
            {"model/job-000001", model.SerializeAsString()},
            {"meta/next_job", "2"}};
  }

  // Opens the table at path_ and checks it holds AJobAndItsModel (and no
  // other job), and that the next job gets the next id, which it forgets.
  void ExpectTheJobKept() {
    auto table = JobTable::Open(path_);
    ASSERT_TRUE(table.ok()) << table.status();
    auto jobs = (*table)->LoadAll();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ((*jobs)[0].job_id(), "job-000001");
    EXPECT_EQ((*jobs)[0].message(), "done");
    auto model = (*table)->GetModel("job-000001");
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(model->clock(), 12);
    v1::JobStatus next;
    ASSERT_TRUE((*table)->Create(&next).ok());
    EXPECT_EQ(next.job_id().substr(0, 4), "job-");
    EXPECT_GT(next.job_id(), "job-000001");
    ASSERT_TRUE((*table)->Delete(next.job_id()).ok());
  }

  testing::ScopedTempDir dir_{"ps_job_table_format"};
  const std::string path_ = dir_.File("table");
};

TEST_F(JobTableFormatTest, ANewTableRecordsTheCurrentVersion) {
  {
    auto table = JobTable::Open(path_);
    ASSERT_TRUE(table.ok()) << table.status();
  }
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
  auto table = JobTable::Open(path_);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
}

// Format 1 as written from 2026-11-21 11:50 until format records: the kind
// marker, jobs, models, sweeps and their counters.
TEST_F(JobTableFormatTest, UpgradesATableWithAKindMarker) {
  auto puts = AJobAndItsModel();
  puts.emplace_back("meta/kind", "ps-coordinator-job-table");
  v1::SweepStatus sweep;
  sweep.set_sweep_id("sweep-000001");
  puts.emplace_back("sweep/sweep-000001", sweep.SerializeAsString());
  puts.emplace_back("meta/next_sweep", "2");
  WriteRaw(puts);
  ExpectTheJobKept();
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
  auto table = JobTable::Open(path_);
  ASSERT_TRUE(table.ok()) << table.status();
  auto sweeps = (*table)->LoadSweeps();
  ASSERT_TRUE(sweeps.ok()) << sweeps.status();
  ASSERT_EQ(sweeps->size(), 1u);
  EXPECT_EQ((*sweeps)[0].sweep_id(), "sweep-000001");
}

// The first tables (2026-11-21, before the kind marker): jobs, models and
// the job counter only. The upgrade adds the marker.
TEST_F(JobTableFormatTest, UpgradesATableFromBeforeTheKindMarker) {
  WriteRaw(AJobAndItsModel());
  ExpectTheJobKept();
  EXPECT_EQ(FormatRecord(), kCurrentRecord);
  ExpectTheJobKept();  // Now as a table of the current format.
}

TEST_F(JobTableFormatTest, AnUnmarkedDatabaseOfOtherKeysIsRefusedUnchanged) {
  WriteRaw({{"job/job-000001", ""}, {"something/else", "x"}});
  const auto before = testing::FilesUnder(path_);
  auto table = JobTable::Open(path_);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(table.status().message(),
              HasSubstr("not a coordinator job table"));
  EXPECT_EQ(testing::FilesUnder(path_), before);
}

TEST_F(JobTableFormatTest, ALaterVersionIsRefusedNamingBothUnchanged) {
  { ASSERT_TRUE(JobTable::Open(path_).ok()); }
  ASSERT_TRUE(
      WriteDataDirFormatVersion(path_, {.kind = "ps-coordinator-job-table",
                                        .description = "",
                                        .current_version = 7})
          .ok());
  const auto before = testing::FilesUnder(path_);
  auto table = JobTable::Open(path_);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(table.status().message(), HasSubstr(path_));
  EXPECT_THAT(table.status().message(),
              HasSubstr("has format version 7; this build reads versions 1 "
                        "to 2"));
  EXPECT_EQ(testing::FilesUnder(path_), before);
}

TEST_F(JobTableFormatTest, AnotherKindOfDirectoryIsRefusedUnchanged) {
  fs::create_directories(path_);
  std::ofstream(path_ + "/" + kDataDirFormatFile)
      << "ps-server-shard-store 2\n";
  const auto before = testing::FilesUnder(path_);
  auto table = JobTable::Open(path_);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(table.status().message(),
              HasSubstr(absl::StrCat("job table at ", path_)));
  EXPECT_THAT(table.status().message(),
              HasSubstr("not a coordinator job table"));
  EXPECT_EQ(testing::FilesUnder(path_), before);
}

}  // namespace
}  // namespace ps

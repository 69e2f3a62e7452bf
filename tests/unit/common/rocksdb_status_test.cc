// RocksDbStatusToAbsl (common/rocksdb_status.h): every RocksDB code and the
// sub-codes it distinguishes, and a real held LOCK file.
#include "common/rocksdb_status.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Mapping {
  std::string name;
  rocksdb::Status status;
  absl::StatusCode code;
};

// gtest prints a parameter with it (instead of its bytes).
void PrintTo(const Mapping& mapping, std::ostream* out) {
  *out << mapping.name;
}

class RocksDbStatusMappingTest : public ::testing::TestWithParam<Mapping> {};

TEST_P(RocksDbStatusMappingTest, MapsTheCodeAndKeepsBothMessages) {
  const absl::Status converted =
      RocksDbStatusToAbsl(GetParam().status, "job table at /d");
  EXPECT_EQ(converted.code(), GetParam().code) << converted;
  const std::string message(converted.message());
  EXPECT_THAT(message, StartsWith("job table at /d: "));
  EXPECT_THAT(message, HasSubstr(GetParam().status.ToString()));
}

INSTANTIATE_TEST_SUITE_P(
    EveryCode, RocksDbStatusMappingTest,
    ::testing::Values(
        Mapping{"NotFound", rocksdb::Status::NotFound("k"),
                absl::StatusCode::kNotFound},
        Mapping{"Corruption", rocksdb::Status::Corruption("bad block"),
                absl::StatusCode::kDataLoss},
        Mapping{"NotSupported", rocksdb::Status::NotSupported("x"),
                absl::StatusCode::kUnimplemented},
        Mapping{"InvalidArgument", rocksdb::Status::InvalidArgument("x"),
                absl::StatusCode::kInvalidArgument},
        Mapping{"IOError", rocksdb::Status::IOError("read", "EIO"),
                absl::StatusCode::kInternal},
        Mapping{"IOErrorPathNotFound", rocksdb::Status::PathNotFound("/d"),
                absl::StatusCode::kNotFound},
        Mapping{"IOErrorNoSpace", rocksdb::Status::NoSpace("disk full"),
                absl::StatusCode::kResourceExhausted},
        Mapping{"IOErrorOnTheLockFile",
                rocksdb::Status::IOError("While lock file: /d/LOCK",
                                         "Resource temporarily unavailable"),
                absl::StatusCode::kUnavailable},
        Mapping{"MergeInProgress", rocksdb::Status::MergeInProgress(),
                absl::StatusCode::kInternal},
        Mapping{"Incomplete", rocksdb::Status::Incomplete("x"),
                absl::StatusCode::kInternal},
        Mapping{"ShutdownInProgress", rocksdb::Status::ShutdownInProgress(),
                absl::StatusCode::kUnavailable},
        Mapping{"TimedOut", rocksdb::Status::TimedOut(),
                absl::StatusCode::kUnavailable},
        Mapping{"Aborted", rocksdb::Status::Aborted(),
                absl::StatusCode::kAborted},
        Mapping{"Busy", rocksdb::Status::Busy(),
                absl::StatusCode::kUnavailable},
        Mapping{"Expired", rocksdb::Status::Expired(),
                absl::StatusCode::kInternal},
        Mapping{"TryAgain", rocksdb::Status::TryAgain(),
                absl::StatusCode::kUnavailable},
        Mapping{"CompactionTooLarge", rocksdb::Status::CompactionTooLarge(),
                absl::StatusCode::kResourceExhausted},
        Mapping{"ColumnFamilyDropped", rocksdb::Status::ColumnFamilyDropped(),
                absl::StatusCode::kInternal}),
    [](const ::testing::TestParamInfo<Mapping>& info) {
      return info.param.name;
    });

TEST(RocksDbStatusTest, OkStaysOk) {
  EXPECT_TRUE(RocksDbStatusToAbsl(rocksdb::Status::OK(), "anything").ok());
}

TEST(RocksDbStatusTest, ADatabaseOpenElsewhereIsUnavailable) {
  const testing::ScopedTempDir dir{"rocksdb_status_test"};
  const std::string path = dir.File("db");
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* first = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, path, &first).ok());
  std::unique_ptr<rocksdb::DB> closer(first);
  rocksdb::DB* second = nullptr;
  const rocksdb::Status refused = rocksdb::DB::Open(options, path, &second);
  ASSERT_FALSE(refused.ok());
  const absl::Status converted = RocksDbStatusToAbsl(refused, "open");
  EXPECT_EQ(converted.code(), absl::StatusCode::kUnavailable) << converted;
  EXPECT_THAT(std::string(converted.message()), HasSubstr("in use"));
}

}  // namespace
}  // namespace ps

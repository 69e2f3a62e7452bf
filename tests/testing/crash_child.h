// The set-up shared by unit tests whose crashes are real processes
// (snapshot_rows_files_test, state_store_unlogged_test): each crash is a gtest
// death test in the "threadsafe" style (the child re-executes the test binary
// fresh) that ends with _exit, which, like kill -9, runs no destructor. The
// parent makes the test's data directory and hands it to the child in an
// environment variable.
#ifndef PS_TESTS_TESTING_CRASH_CHILD_H_
#define PS_TESTS_TESTING_CRASH_CHILD_H_

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "server/rocksdb_shard_store.h"
#include "server/shard_store.h"

namespace ps::testing {

// The test's data directory: in the death test's child, the one the
// environment variable `variable` names; in the parent, a new directory
// under the temporary directory named after `prefix`, then set in the
// environment for the child. Empty if it cannot be made. Not thread-safe
// (it changes the environment).
inline std::string CrashChildDataDir(const char* variable, const char* prefix) {
  if (const char* dir = std::getenv(variable); dir != nullptr) return dir;
  std::string pattern = (std::filesystem::temp_directory_path() /
                         (std::string(prefix) + "_XXXXXX"))
                            .string();
  if (::mkdtemp(pattern.data()) == nullptr) return "";
  ::setenv(variable, pattern.c_str(), 1);
  return pattern;
}

// A fixture for tests that crash a child process: dir_ (CrashChildDataDir,
// removed after the test, its variable unset) and path_, a store's path in
// it. A subclass passes its variable and prefix to the constructor.
class CrashChildTest : public ::testing::Test {
 protected:
  // `variable`, `prefix`: CrashChildDataDir's; both must outlive the test.
  CrashChildTest(const char* variable, const char* prefix)
      : variable_(variable), prefix_(prefix) {}

  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    dir_ = CrashChildDataDir(variable_, prefix_);
    ASSERT_FALSE(dir_.empty());
    path_ = dir_ + "/data";
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    ::unsetenv(variable_);
  }

  std::string dir_;   // The test's data directory.
  std::string path_;  // dir_ + "/data": the store's directory.

 private:
  const char* const variable_;
  const char* const prefix_;
};

// In the child, the start both crash tests share: a store opened at
// `options.path` with `snapshot` written (a job "job" at log sequence 0) and
// the update-log records "r1", "r2", "r3" appended after it from sequence 1,
// then closed cleanly. Exits the process with status 1 on any error.
inline void WriteSnapshotThenThreeRecords(
    const RocksDbShardStoreOptions& options, const ShardWrite& snapshot) {
  auto store = RocksDbShardStore::Open(options);
  if (!store.ok() || !(*store)->Write(snapshot).ok() ||
      !(*store)->AppendLog("job", 1, {"r1", "r2", "r3"}, false).ok()) {
    _exit(1);
  }
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_CRASH_CHILD_H_

// A test's temporary directory: made fresh, removed with everything in it
// when the test is done. The one way tests make their scratch directories.
#ifndef PS_TESTS_TESTING_SCOPED_TEMP_DIR_H_
#define PS_TESTS_TESTING_SCOPED_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace ps::testing {

// A new directory under gtest's temporary directory (::testing::TempDir(),
// $TEST_TMPDIR or /tmp/), named `prefix` and six random characters (mkdtemp),
// removed with all it holds on destruction. A fixture declares it before the
// members that use the directory (servers, stores), so that it outlives them:
//
//   const ScopedTempDir temp_{"ps-nodes"};
//   const std::string dir_ = temp_.path();
//
// Not copyable. Errors: a test failure (ADD_FAILURE) if it cannot be made;
// path() is then the unfilled pattern.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(absl::string_view prefix = "ps-test")
      : path_(absl::StrCat(::testing::TempDir(), prefix, "-XXXXXX")) {
    if (::mkdtemp(path_.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << path_;
    }
  }
  ~ScopedTempDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  // The directory, without a trailing '/'.
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(absl::string_view name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_SCOPED_TEMP_DIR_H_

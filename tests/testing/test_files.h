// Reading and writing whole files in tests: the inputs of reader tests
// (IDX, CSV, libsvm, Criteo; plain or gzip), and the bytes of what a store
// left on disk.
#ifndef PS_TESTS_TESTING_TEST_FILES_H_
#define PS_TESTS_TESTING_TEST_FILES_H_

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace ps::testing {

// Writes `bytes` to `path` (created or truncated), gzip-compressed when
// `gzip` (zlib at level 1: what is read back is the same at any level).
// Errors: test failures naming the call that failed.
inline void WriteDataFile(const std::string& path, absl::string_view bytes,
                          bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb1");
    ASSERT_NE(f, nullptr) << "gzopen " << path;
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
  } else {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << "fopen " << path;
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    EXPECT_EQ(std::fclose(f), 0);
  }
}

// The bytes of the file at `path`; empty if it cannot be read.
inline std::string ReadFileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// `relative`, a path in the source tree, under $PS_SOURCE_DIR (which ctest
// sets); as given without it, so that a binary run from the source root
// finds it too.
inline std::string SourcePath(const std::string& relative) {
  const char* root = std::getenv("PS_SOURCE_DIR");
  return root == nullptr ? relative : std::string(root) + "/" + relative;
}

// Every regular file under `dir`, at any depth, by its path relative to
// `dir`, and its bytes; but RocksDB's informational logs (LOG*), which a
// reopen rewrites.
inline std::map<std::string, std::string> FilesUnder(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() ||
        absl::StartsWith(entry.path().filename().string(), "LOG")) {
      continue;
    }
    files[std::filesystem::relative(entry.path(), dir).string()] =
        ReadFileBytes(entry.path());
  }
  return files;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_TEST_FILES_H_

// The CSV and libsvm readers: what they read, and clear errors naming the
// file and line for malformed input; files plain and gzip-compressed.

#include <string>

#include "common/csv_reader.h"
#include "common/dataset_reader.h"
#include "common/libsvm_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) {
  return std::string(status.message());
}

TEST(CsvReaderTest, ReadsLabelsAndValues) {
  auto data =
      ParseCsvDataset("1,0.5,-2\r\n\n0, 3 ,1e-3\n", "d.csv", {.dim = 2});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples, 2);
  EXPECT_EQ(data->dim, 2);
  EXPECT_THAT(data->labels, ElementsAre(1, 0));
  EXPECT_THAT(data->features, ElementsAre(0.5f, -2.0f, 3.0f, 1e-3f));
}

TEST(CsvReaderTest, SkipsAHeaderAndStopsAtMaxSamples) {
  auto data = ParseCsvDataset("label,a\n2,1\n3,4\n4,5", "d.csv",
                              {.dim = 1, .header = true, .max_samples = 2});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->labels, ElementsAre(2, 3));
  EXPECT_THAT(data->features, ElementsAre(1.0f, 4.0f));
  // Without header=true the header is an error on line 1.
  auto refused = ParseCsvDataset("label,a\n2,1\n", "d.csv", {.dim = 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(Message(refused.status()),
              StartsWith("d.csv:1: the label is not an integer"));
}

TEST(CsvReaderTest, MalformedInputNamesTheLineAndTheProblem) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"1,2,3\n1,2\n",
       "d.csv:2: expected 3 fields (the label and 2 values), got 2"},
      {"1,2,3,4\n",
       "d.csv:1: expected 3 fields (the label and 2 values), got 4"},
      {"1,2,x\n", "d.csv:1: value 2 is not a number (\"x\")"},
      {"1,2,\n", "d.csv:1: value 2 is empty"},
      {"-1,2,3\n", "d.csv:1: the label is negative"},
      {"1.5,2,3\n", "d.csv:1: the label is not an integer (\"1.5\")"},
      {"1,nan,3\n", "d.csv:1: value 1 is not finite"},
      {"1,1e99,3\n", "d.csv:1: value 1 is not"},
      {"\"1\",2,3\n", "d.csv:1: the label is not an integer"},
      {"\n\n", "d.csv: no samples"},
  };
  for (const auto& c : cases) {
    auto data = ParseCsvDataset(c.text, "d.csv", {.dim = 2});
    ASSERT_FALSE(data.ok()) << c.text;
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(data.status()), StartsWith(c.message)) << c.text;
  }
  EXPECT_FALSE(ParseCsvDataset("1,2", "d.csv", {.dim = 0}).ok());
}

TEST(LibsvmReaderTest, ReadsSparseSamples) {
  auto data = ParseLibsvmDataset(
      "1 1:0.5 3:-2 # a comment\n# only a comment\n\n0\t2:4\r\n2", "d.svm",
      {.dim = 3});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples, 3);
  EXPECT_THAT(data->labels, ElementsAre(1, 0, 2));
  EXPECT_THAT(data->features, ElementsAre(0.5f, 0.0f, -2.0f,  //
                                          0.0f, 4.0f, 0.0f,   //
                                          0.0f, 0.0f, 0.0f));
  auto first = ParseLibsvmDataset("1 1:1\n2 2:2\n", "d.svm",
                                  {.dim = 2, .max_samples = 1});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->num_samples, 1);
}

TEST(LibsvmReaderTest, MalformedInputNamesTheLineAndTheProblem) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"1 1:1\n1 4:1\n", "d.svm:2: index 4 is outside [1, 3]"},
      {"1 0:1\n", "d.svm:1: index 0 is outside [1, 3]"},
      {"1 2:1 2:3\n", "d.svm:1: index 2 does not increase (after 2)"},
      {"1 3:1 1:3\n", "d.svm:1: index 1 does not increase (after 3)"},
      {"1 2\n", "d.svm:1: expected index:value (\"2\")"},
      {"1 a:2\n", "d.svm:1: the index is not an integer (\"a:2\")"},
      {"1 2:b\n", "d.svm:1: the value of index 2 is not a number (\"b\")"},
      {"1 2:\n", "d.svm:1: the value of index 2 is empty"},
      {"1 2:inf\n", "d.svm:1: the value of index 2 is not finite"},
      {"-1 1:1\n", "d.svm:1: the label is negative"},
      {"+1x 1:1\n", "d.svm:1: the label is not an integer"},
      {"# nothing\n", "d.svm: no samples"},
  };
  for (const auto& c : cases) {
    auto data = ParseLibsvmDataset(c.text, "d.svm", {.dim = 3});
    ASSERT_FALSE(data.ok()) << c.text;
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(data.status()), StartsWith(c.message)) << c.text;
  }
}

class TextFilesTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text,
                    bool gzip) {
    const std::string path = dir_.File(name);
    testing::WriteDataFile(path, text, gzip);
    return path;
  }

  testing::ScopedTempDir dir_{"text_readers"};
};

TEST_F(TextFilesTest, ReadsPlainAndGzipFilesThroughTheSpec) {
  v1::DatasetSpec csv;
  csv.set_format(v1::DatasetSpec::CSV);
  csv.set_csv_header(true);
  csv.set_train_file(Write("train.csv", "y,a,b\n1,2,3\n0,4,5\n", false));
  csv.set_test_file(Write("test.csv.gz", "y,a,b\n1,6,7\n", true));
  auto train = ReadDataset(csv, true, 2);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_THAT(train->features, ElementsAre(2.0f, 3.0f, 4.0f, 5.0f));
  auto test = ReadDataset(csv, false, 2);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_THAT(test->labels, ElementsAre(1));
  EXPECT_EQ(LabelsPath(csv, true), csv.train_file());

  v1::DatasetSpec svm;
  svm.set_format(v1::DatasetSpec::LIBSVM);
  svm.set_train_file(Write("train.svm.gz", "3 2:1.5\n", true));
  svm.set_max_train_samples(1);
  auto sparse = ReadDataset(svm, true, 2);
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_THAT(sparse->features, ElementsAre(0.0f, 1.5f));

  svm.set_test_file(dir_.File("missing.svm"));
  auto missing = ReadDataset(svm, false, 2);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(missing.status()), HasSubstr("missing.svm"));

  // A malformed file names its path and line.
  svm.set_max_train_samples(0);
  svm.set_train_file(Write("bad.svm", "1 1:1\n1 1:x\n", false));
  auto bad = ReadDataset(svm, true, 2);
  EXPECT_THAT(Message(bad.status()), HasSubstr("bad.svm:2: "));
}

}  // namespace
}  // namespace ps

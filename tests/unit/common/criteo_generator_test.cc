// bench/criteo_gen.py against the C++ side: a small generated data set
// (gzip) read by ReadCriteoFile has the row counts, the id encoding and the
// distinct ids teacher.json reports, and BinaryAuc / BinaryLogLoss of the
// teacher's written test probabilities equal teacher.json's best figures.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/binary_metrics.h"
#include "common/criteo_reader.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

constexpr int kTrainRows = 2000, kTestRows = 600;

class CriteoGeneratorTest : public ::testing::Test {
 protected:
  // The number teacher.json holds at `key` (a top-level key, or one inside
  // the object `parent`).
  double Number(const std::string& key, const std::string& parent = "") {
    const auto& fields =
        parent.empty() ? teacher_.fields()
                       : teacher_.fields().at(parent).struct_value().fields();
    return fields.at(key).number_value();
  }
  std::vector<int64_t> List(const std::string& key) {
    std::vector<int64_t> out;
    for (const auto& v : teacher_.fields().at(key).list_value().values()) {
      out.push_back(static_cast<int64_t>(v.number_value()));
    }
    return out;
  }

  const std::filesystem::path script_ =
      testing::SourcePath("bench/criteo_gen.py");
  testing::ScopedTempDir dir_{"criteo_gen"};
  google::protobuf::Struct teacher_;
};

TEST_F(CriteoGeneratorTest, FilesMatchTheReaderAndTheTeachersFigures) {
  if (!std::filesystem::exists("/usr/bin/python3")) {
    GTEST_SKIP() << "no /usr/bin/python3";
  }
  if (!std::filesystem::exists(script_)) {
    GTEST_SKIP() << "cannot find " << script_ << " (set PS_SOURCE_DIR)";
  }
  const std::string command = absl::StrCat(
      "/usr/bin/python3 ", script_.string(), " --out ", dir_.path(),
      " --train_rows ", kTrainRows, " --test_rows ", kTestRows,
      " --seed 5 --min_cardinality 3 --max_cardinality 3000 --drift 0.5"
      " --gzip --write_test_probabilities > ",
      dir_.File("log"), " 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0)
      << testing::ReadFileBytes(dir_.File("log"));
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  testing::ReadFileBytes(dir_.File("teacher.json")), &teacher_)
                  .ok());

  auto train = ReadCriteoFile(dir_.File("train.tsv.gz"));
  ASSERT_TRUE(train.ok()) << train.status();
  auto test = ReadCriteoFile(dir_.File("test.tsv.gz"));
  ASSERT_TRUE(test.ok()) << test.status();
  ASSERT_EQ(train->size(), kTrainRows);
  ASSERT_EQ(test->size(), kTestRows);
  EXPECT_EQ(Number("train_rows"), kTrainRows);

  // Every id is its field's: (field << 33), bit 32 set unless missing.
  for (const CtrDataset* data : {&*train, &*test}) {
    for (int64_t i = 0; i < data->size(); ++i) {
      for (int f = 0; f < kCriteoFields; ++f) {
        const uint64_t id = data->ids[i * kCriteoFields + f];
        ASSERT_EQ(id >> 33, static_cast<uint64_t>(f)) << i;
        ASSERT_TRUE((id & (uint64_t{1} << 32)) != 0 || id == CriteoMissingId(f))
            << i;
      }
    }
  }
  // Distinct values per field seen in train, and test values train never
  // saw (drift makes some): as teacher.json counts them.
  const std::vector<int64_t> distinct = List("distinct_train_ids");
  const std::vector<int64_t> unseen = List("test_values_unseen_in_train");
  ASSERT_EQ(distinct.size(), static_cast<size_t>(kCriteoFields));
  ASSERT_EQ(unseen.size(), static_cast<size_t>(kCriteoFields));
  int64_t unseen_total = 0;
  for (int f = 0; f < kCriteoFields; ++f) {
    absl::flat_hash_set<uint64_t> seen;
    for (int64_t i = 0; i < train->size(); ++i) {
      const uint64_t id = train->ids[i * kCriteoFields + f];
      if (id != CriteoMissingId(f)) seen.insert(id);
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), distinct[f]) << "C" << f + 1;
    int64_t new_in_test = 0;
    for (int64_t i = 0; i < test->size(); ++i) {
      const uint64_t id = test->ids[i * kCriteoFields + f];
      if (id != CriteoMissingId(f) && !seen.contains(id)) ++new_in_test;
    }
    EXPECT_EQ(new_in_test, unseen[f]) << "C" << f + 1;
    unseen_total += new_in_test;
  }
  EXPECT_GT(unseen_total, 0);

  double positives = 0;
  for (int32_t label : train->labels) positives += label;
  EXPECT_NEAR(positives / kTrainRows, Number("train", "positive_rate"), 1e-12);

  // The teacher's probabilities give teacher.json's best AUC and log loss.
  std::vector<float> probabilities;
  std::ifstream in(dir_.File("test_probabilities.txt"));
  for (std::string line; std::getline(in, line);) {
    float p = 0;
    ASSERT_TRUE(absl::SimpleAtof(line, &p)) << line;
    probabilities.push_back(p);
  }
  ASSERT_EQ(probabilities.size(), static_cast<size_t>(kTestRows));
  const double auc = BinaryAuc(probabilities, test->labels);
  EXPECT_NEAR(auc, Number("best_test_auc"), 1e-6);
  EXPECT_GT(auc, 0.6);  // The teacher knows something.
  EXPECT_NEAR(BinaryLogLoss(probabilities, test->labels),
              Number("best_test_log_loss"), 1e-6);
}

}  // namespace
}  // namespace ps

// Model files with sparse tables (PSMODEL2, docs/model-format.md): round
// trip of dense tensors and rows through the streaming writer and reader,
// the documented byte layout, damaged files, and the check of a file
// against the job a new job would start from it.
#include "common/model_tables.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/float_codec.h"
#include "common/model_file.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// An EXTERNAL model with one dense tensor [2, 3] and tables "a" (dim 2) and
// "b" (dim 3).
v1::TrainedModel SmallModel() {
  v1::TrainedModel model;
  model.set_job_id("job-000007");
  v1::ModelSpec* spec = model.mutable_model();
  spec->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* decl = spec->add_tensors();
  decl->set_name("w");
  decl->add_shape(2);
  decl->add_shape(3);
  for (auto [name, dim] : {std::pair{"a", 2}, std::pair{"b", 3}}) {
    v1::SparseTableSpec* t = spec->add_sparse_tables();
    t->set_name(name);
    t->set_dim(dim);
    t->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  }
  v1::Tensor* w = model.add_tensors();
  w->set_name("w");
  w->add_shape(2);
  w->add_shape(3);
  EncodeFloats(std::vector<float>{1, 2, 3, 4, 5, 6}, w->mutable_data());
  return model;
}

class ModelTablesTest : public ::testing::Test {
 protected:
  std::string Bytes() const { return testing::ReadFileBytes(path_); }
  void SetBytes(const std::string& bytes) const {
    testing::WriteDataFile(path_, bytes);
  }
  // Writes SmallModel with rows: table 1 ids {7, 9}, table 0 ids 0..n-1.
  void WriteSmall(int n) const {
    auto writer = ModelFileWriter::Create(SmallModel(), path_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)
                    ->AppendRows(1, std::vector<uint64_t>{7, 9},
                                 std::vector<float>{1, 2, 3, 4, 5, 6})
                    .ok());
    std::vector<uint64_t> ids(n);
    std::vector<float> values(2 * n);
    for (int i = 0; i < n; ++i) {
      ids[i] = i;
      values[2 * i] = static_cast<float>(i);
      values[2 * i + 1] = -static_cast<float>(i);
    }
    ASSERT_TRUE((*writer)->AppendRows(0, ids, values).ok());
    EXPECT_FALSE(fs::exists(path_));  // Only once finished.
    ASSERT_TRUE((*writer)->Finish().ok());
  }

  testing::ScopedTempDir dir_{"ps-model-tables"};
  const std::string path_ = dir_.File("model.bin");
};

TEST_F(ModelTablesTest, RoundTripOfDenseTensorsAndRows) {
  // 70,000 rows of table 0: more than one chunk (65,536 rows at most).
  WriteSmall(70000);
  auto model = ReadModelFile(path_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tensors(0).data(), SmallModel().tensors(0).data());
  auto tables = ReadAllModelTables(path_);
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_EQ(tables->size(), 2u);
  EXPECT_EQ((*tables)[1].ids, (std::vector<uint64_t>{7, 9}));
  EXPECT_EQ((*tables)[1].values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ((*tables)[0].ids.size(), 70000u);
  EXPECT_EQ((*tables)[0].ids[69999], 69999u);
  EXPECT_EQ((*tables)[0].values[2 * 69999 + 1], -69999.0f);

  auto reader = ModelTableReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  TableChunk chunk;
  int chunks = 0;
  while (true) {
    auto more = (*reader)->Next(&chunk);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ++chunks;
  }
  EXPECT_EQ(chunks, 3);  // Table 1's, then table 0's in two.
}

TEST_F(ModelTablesTest, TheLayoutIsTheDocumentedOne) {
  WriteSmall(1);
  const std::string bytes = Bytes();
  ASSERT_EQ(bytes.substr(0, 8), "PSMODEL2");
  uint32_t header = 0;
  std::memcpy(&header, bytes.data() + 8, 4);
  size_t at = 12 + header + 6 * 4;  // After the dense data.
  uint32_t head[2];
  std::memcpy(head, bytes.data() + at, 8);
  EXPECT_EQ(head[0], 1u);
  EXPECT_EQ(head[1], 2u);
  uint64_t id = 0;
  std::memcpy(&id, bytes.data() + at + 8, 8);
  EXPECT_EQ(id, 7u);
  float v = 0;
  std::memcpy(&v, bytes.data() + at + 8 + 16 + 4 * 5, 4);
  EXPECT_EQ(v, 6.0f);
  at += 8 + 16 + 24;  // Table 0's chunk: one row of dim 2.
  std::memcpy(head, bytes.data() + at, 8);
  EXPECT_EQ(head[0], 0u);
  EXPECT_EQ(head[1], 1u);
  at += 8 + 8 + 8;
  std::memcpy(head, bytes.data() + at, 8);
  EXPECT_EQ(head[0], kTableSectionEnd);
  EXPECT_EQ(head[1], 0u);
  uint64_t rows = 0;
  std::memcpy(&rows, bytes.data() + at + 8, 8);
  EXPECT_EQ(rows, 3u);
  EXPECT_EQ(bytes.size(), at + 16);
}

TEST_F(ModelTablesTest, DamagedTableSectionsAreDataLoss) {
  WriteSmall(3);
  const std::string good = Bytes();
  const auto expect_loss = [&](const std::string& bytes, const char* what) {
    SetBytes(bytes);
    auto tables = ReadAllModelTables(path_);
    EXPECT_EQ(tables.status().code(), absl::StatusCode::kDataLoss) << what;
    EXPECT_THAT(tables.status().message(), HasSubstr(path_)) << what;
  };
  expect_loss(good.substr(0, good.size() - 1), "truncated end marker");
  expect_loss(good + "x", "a byte after the end");
  expect_loss(good.substr(0, good.size() - 30), "truncated chunk");
  uint32_t header = 0;
  std::memcpy(&header, good.data() + 8, 4);
  const size_t first = 12 + header + 24;
  std::string bad = good;
  bad[first] = 5;  // Table 5 of 2.
  expect_loss(bad, "unknown table");
  bad = good;
  std::memset(bad.data() + first + 4, 0, 4);  // No rows.
  expect_loss(bad, "empty chunk");
  bad = good;
  bad[bad.size() - 8] = 9;  // End marker counts 9 rows.
  expect_loss(bad, "wrong count");
}

TEST_F(ModelTablesTest, WriterRefusesBadRows) {
  auto writer = ModelFileWriter::Create(SmallModel(), path_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)
                ->AppendRows(2, std::vector<uint64_t>{1}, std::vector<float>{1})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)
                ->AppendRows(0, std::vector<uint64_t>{1}, std::vector<float>{1})
                .code(),
            absl::StatusCode::kInvalidArgument);
  writer->reset();  // Unfinished: nothing is left behind.
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST_F(ModelTablesTest, DenseOnlyFilesHaveNoTables) {
  ASSERT_TRUE(WriteModelFile(SmallModel(), path_).ok());
  auto tables = ReadAllModelTables(path_);
  ASSERT_TRUE(tables.ok()) << tables.status();
  EXPECT_TRUE((*tables)[0].ids.empty());
  EXPECT_EQ(ModelTableReader::Open(path_).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(ModelTablesTest, CheckModelFitsJobNamesTheMismatch) {
  const v1::TrainedModel file = SmallModel();
  v1::JobSpec spec;
  *spec.mutable_model() = file.model();
  EXPECT_TRUE(CheckModelFitsJob(file, spec).ok());

  v1::JobSpec wrong_dim = spec;
  wrong_dim.mutable_model()->mutable_sparse_tables(1)->set_dim(4);
  absl::Status s = CheckModelFitsJob(file, wrong_dim);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("table 1 is b of dim 3"));

  v1::JobSpec fewer = spec;
  fewer.mutable_model()->mutable_sparse_tables()->RemoveLast();
  s = CheckModelFitsJob(file, fewer);
  EXPECT_THAT(s.message(),
              HasSubstr("table 1 (b) is not a table of the job's model"));

  v1::JobSpec renamed = spec;
  renamed.mutable_model()->mutable_sparse_tables(0)->set_name("z");
  EXPECT_THAT(CheckModelFitsJob(file, renamed).message(),
              HasSubstr("but the job's model.sparse_tables[0] is z"));

  v1::JobSpec wider = spec;
  wider.mutable_model()->mutable_tensors(0)->set_shape(1, 4);
  EXPECT_THAT(CheckModelFitsJob(file, wider).message(),
              HasSubstr("tensor 0 is w [2, 3] in the model file"));
}

}  // namespace
}  // namespace ps

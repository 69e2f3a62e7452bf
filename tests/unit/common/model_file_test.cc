// Model files (docs/model-format.md): round trip, the documented layout, and
// damaged files: truncated, bad magic, shapes that do not match the data.
#include "common/model_file.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/float_codec.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A softmax regression 3 -> 2 with distinct values in every tensor.
v1::TrainedModel SmallModel() {
  v1::TrainedModel model;
  model.set_job_id("job-000042");
  model.mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  model.mutable_model()->set_input_dim(3);
  model.mutable_model()->set_num_classes(2);
  model.set_clock(17);
  model.set_test_accuracy(0.8125f);
  model.set_test_samples(16);
  auto tensors = ModelTensors(model.model());
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  float next = -1.5f;
  for (const TensorSpec& spec : *tensors) {
    v1::Tensor* t = model.add_tensors();
    t->set_name(spec.name);
    for (int64_t d : spec.shape) t->add_shape(d);
    std::vector<float> values(spec.num_elems());
    for (float& v : values) v = (next += 0.25f);
    EncodeFloats(values, t->mutable_data());
  }
  return model;
}

class ModelFileTest : public ::testing::Test {
 protected:
  // Writes SmallModel() and returns the file's bytes.
  std::string WrittenBytes() {
    EXPECT_TRUE(WriteModelFile(SmallModel(), path_).ok());
    return testing::ReadFileBytes(path_);
  }

  testing::ScopedTempDir dir_{"model_file_test"};
  const std::string path_ = dir_.File("model.bin");
};

TEST_F(ModelFileTest, RoundTripKeepsEverything) {
  const v1::TrainedModel model = SmallModel();
  ASSERT_TRUE(WriteModelFile(model, path_).ok());
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  auto read = ReadModelFile(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*read, model))
      << read->DebugString();
  EXPECT_TRUE(CheckTrainedModel(*read).ok());
}

TEST_F(ModelFileTest, LayoutIsMagicLengthJsonHeaderThenFloats) {
  const std::string bytes = WrittenBytes();
  ASSERT_GE(bytes.size(), 12u);
  EXPECT_EQ(bytes.substr(0, 8), "PSMODEL1");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint32_t header = p[8] | p[9] << 8 | p[10] << 16 | p[11] << 24;
  const std::string json = bytes.substr(12, header);
  EXPECT_THAT(json, HasSubstr("\"job_id\": \"job-000042\""));
  EXPECT_THAT(json, HasSubstr("\"name\": \"dense0.weight\""));
  EXPECT_THAT(json, HasSubstr("\"name\": \"dense0.bias\""));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"data\"")));
  // The data: weight [3, 2] then bias [2], float32 little-endian.
  const v1::TrainedModel model = SmallModel();
  ASSERT_EQ(bytes.size(), 12 + header + (6 + 2) * sizeof(float));
  EXPECT_EQ(bytes.substr(12 + header),
            model.tensors(0).data() + model.tensors(1).data());
  float first;
  std::memcpy(&first, bytes.data() + 12 + header, sizeof(first));
  EXPECT_EQ(first, -1.25f);
}

TEST_F(ModelFileTest, MissingFileIsNotFoundNamingThePath) {
  auto read = ReadModelFile(dir_.File("nope.bin"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr(dir_.File("nope.bin")));
}

TEST_F(ModelFileTest, WriteIntoAMissingDirectoryFails) {
  absl::Status s = WriteModelFile(SmallModel(), dir_.File("no/such/model.bin"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(dir_.File("no/such/model.bin")));
}

TEST_F(ModelFileTest, EveryTruncationIsDataLoss) {
  const std::string bytes = WrittenBytes();
  // Every prefix: inside the magic, the length, the header and the data.
  for (size_t n = 0; n < bytes.size(); ++n) {
    testing::WriteDataFile(path_, bytes.substr(0, n));
    auto read = ReadModelFile(path_);
    ASSERT_EQ(read.status().code(), absl::StatusCode::kDataLoss)
        << "prefix of " << n << " bytes: " << read.status();
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(path_));
  }
}

TEST_F(ModelFileTest, TrailingBytesAreDataLoss) {
  testing::WriteDataFile(path_, WrittenBytes() + "xyzw");
  auto read = ReadModelFile(path_);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("but the file has"));
}

TEST_F(ModelFileTest, BadMagicIsDataLoss) {
  std::string bytes = WrittenBytes();
  bytes[6] = 'L';
  bytes[7] = '2';
  testing::WriteDataFile(path_, bytes);
  auto read = ReadModelFile(path_);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("PSMODEL1"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path_));
}

TEST_F(ModelFileTest, HeaderLengthBeyondTheFileIsDataLoss) {
  std::string bytes = WrittenBytes();
  bytes[11] = '\x7f';
  testing::WriteDataFile(path_, bytes);
  EXPECT_EQ(ReadModelFile(path_).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ModelFileTest, UnreadableHeaderIsDataLoss) {
  std::string bytes = WrittenBytes();
  bytes[12] = '[';  // The JSON object's "{".
  testing::WriteDataFile(path_, bytes);
  auto read = ReadModelFile(path_);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("header"));
}

// A file whose header's shapes disagree with the amount of data: the header
// says [3, 3] (9 values) where the file holds 6 + 2 values.
TEST_F(ModelFileTest, ShapesInconsistentWithTheDataAreDataLoss) {
  std::string bytes = WrittenBytes();
  const std::string json = bytes.substr(12, bytes.size() - 12 - 8 * 4);
  const size_t at = json.find("\"2\"");  // The first shape's second dimension.
  ASSERT_NE(at, std::string::npos) << json;
  std::string bad_json = json;
  bad_json.replace(at, 3, "\"3\"");
  bytes.replace(12, json.size(), bad_json);
  testing::WriteDataFile(path_, bytes);
  auto read = ReadModelFile(path_);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("dense0.weight"));

  // And shapes that would overflow int64 if multiplied blindly.
  bad_json = json;
  bad_json.replace(at, 3, "\"9223372036854775807\"");
  bytes = WrittenBytes();
  bytes.replace(8, 4 + json.size(), std::string(4, '\0') + bad_json);
  const uint32_t n = bad_json.size();
  for (int i = 0; i < 4; ++i) bytes[8 + i] = static_cast<char>(n >> (8 * i));
  testing::WriteDataFile(path_, bytes);
  EXPECT_EQ(ReadModelFile(path_).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ModelFileTest, WritingDataThatDoesNotFitItsShapeIsRefused) {
  v1::TrainedModel model = SmallModel();
  model.mutable_tensors(1)->mutable_data()->append("abcd");  // 3 floats, not 2.
  absl::Status s = WriteModelFile(model, path_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dense0.bias"));
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
}

TEST(CheckTrainedModelTest, RefusesTensorsThatDoNotMatchTheSpec) {
  EXPECT_TRUE(CheckTrainedModel(SmallModel()).ok());

  v1::TrainedModel missing = SmallModel();
  missing.mutable_tensors()->RemoveLast();
  EXPECT_THAT(std::string(CheckTrainedModel(missing).message()),
              StartsWith("tensors: the model has 2 tensors, not 1"));

  v1::TrainedModel renamed = SmallModel();
  renamed.mutable_tensors(1)->set_name("dense0.beta");
  EXPECT_EQ(CheckTrainedModel(renamed).code(),
            absl::StatusCode::kInvalidArgument);

  v1::TrainedModel reshaped = SmallModel();
  reshaped.mutable_tensors(0)->set_shape(0, 2);
  reshaped.mutable_tensors(0)->set_shape(1, 3);
  EXPECT_THAT(std::string(CheckTrainedModel(reshaped).message()),
              HasSubstr("expected dense0.weight [3, 2]"));

  v1::TrainedModel short_data = SmallModel();
  short_data.mutable_tensors(0)->mutable_data()->resize(5 * sizeof(float));
  EXPECT_THAT(std::string(CheckTrainedModel(short_data).message()),
              HasSubstr("20 bytes of data, expected 24"));

  v1::TrainedModel bad_spec = SmallModel();
  bad_spec.mutable_model()->set_num_classes(0);
  EXPECT_EQ(CheckTrainedModel(bad_spec).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps

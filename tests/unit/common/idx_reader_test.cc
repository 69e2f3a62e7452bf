#include "common/idx_reader.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Big-endian IDX header: 0, 0, type, rank, then the dimensions.
std::vector<uint8_t> Header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(d >> 24);
    out.push_back(d >> 16);
    out.push_back(d >> 8);
    out.push_back(d);
  }
  return out;
}

std::vector<uint8_t> Concat(std::vector<uint8_t> a,
                            const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class IdxReaderTest : public ::testing::Test {
 protected:
  // Writes `bytes` to dir/name, gzip-compressed when `gzip`; returns the path.
  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes,
                    bool gzip) {
    const std::string path = dir_.File(name);
    testing::WriteDataFile(
        path,
        absl::string_view(reinterpret_cast<const char*>(bytes.data()),
                          bytes.size()),
        gzip);
    return path;
  }

  // Three 2x2 images with pixels 0..11 scaled by 17 (so 255 appears), and
  // labels 7, 0, 9.
  std::vector<uint8_t> Images() {
    std::vector<uint8_t> pixels;
    for (int i = 0; i < 12; ++i) pixels.push_back(i == 11 ? 255 : i * 17);
    return Concat(Header(0x08, {3, 2, 2}), pixels);
  }
  std::vector<uint8_t> Labels() { return Concat(Header(0x08, {3}), {7, 0, 9}); }

  testing::ScopedTempDir dir_{"idx_reader_test"};
};

void ExpectSmallDataset(const Dataset& data, int64_t n) {
  ASSERT_EQ(data.num_samples, n);
  EXPECT_EQ(data.dim, 4);
  ASSERT_EQ(data.features.size(), static_cast<size_t>(4 * n));
  ASSERT_EQ(data.labels.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < 4 * n; ++i) {
    const float expected = (i == 11 ? 255.0f : i * 17.0f) / 255.0f;
    EXPECT_FLOAT_EQ(data.features[i], expected) << "index " << i;
  }
  const std::vector<int32_t> labels = {7, 0, 9};
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(data.labels[i], labels[i]);
}

TEST_F(IdxReaderTest, ReadsPlainFiles) {
  const std::string images = Write("images", Images(), /*gzip=*/false);
  const std::string labels = Write("labels", Labels(), /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data, 3);
  EXPECT_FLOAT_EQ(data->features[0], 0.0f);
  EXPECT_FLOAT_EQ(data->features[11], 1.0f);
}

TEST_F(IdxReaderTest, ReadsGzipFiles) {
  const std::string images = Write("images.gz", Images(), /*gzip=*/true);
  const std::string labels = Write("labels.gz", Labels(), /*gzip=*/true);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data, 3);
}

TEST_F(IdxReaderTest, MixesGzipAndPlain) {
  const std::string images = Write("images.gz", Images(), /*gzip=*/true);
  const std::string labels = Write("labels", Labels(), /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data, 3);
}

TEST_F(IdxReaderTest, MaxSamplesKeepsTheFirstSamples) {
  const std::string images = Write("images.gz", Images(), /*gzip=*/true);
  const std::string labels = Write("labels.gz", Labels(), /*gzip=*/true);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data, 2);
  EXPECT_THAT(data->labels, ElementsAre(7, 0));

  // More than the file holds: everything.
  data = ReadIdxDataset(images, labels, 100);
  ASSERT_TRUE(data.ok()) << data.status();
  ExpectSmallDataset(*data, 3);
}

TEST_F(IdxReaderTest, MissingFileIsNotFound) {
  const std::string labels = Write("labels", Labels(), /*gzip=*/false);
  const std::string missing = dir_.File("no-such-images.gz");
  absl::StatusOr<Dataset> data = ReadIdxDataset(missing, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr(missing));

  const std::string images = Write("images", Images(), /*gzip=*/false);
  data = ReadIdxDataset(images, dir_.File("no-such-labels"), 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr("no-such-labels"));
}

TEST_F(IdxReaderTest, TruncatedPayloadIsDataLoss) {
  for (bool gzip : {false, true}) {
    std::vector<uint8_t> bytes = Images();
    bytes.pop_back();
    const std::string images = Write(gzip ? "short.gz" : "short", bytes, gzip);
    const std::string labels = Write("labels", Labels(), /*gzip=*/false);
    absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss)
        << "gzip=" << gzip << ": " << data.status();
    EXPECT_THAT(data.status().message(), HasSubstr(images));
  }
}

TEST_F(IdxReaderTest, TruncatedHeaderIsDataLoss) {
  std::vector<uint8_t> bytes = Labels();
  bytes.resize(6);  // Magic and half a dimension.
  const std::string images = Write("images", Images(), /*gzip=*/false);
  const std::string labels = Write("labels", bytes, /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss) << data.status();

  const std::string empty = Write("empty", {}, /*gzip=*/false);
  data = ReadIdxDataset(empty, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss) << data.status();
}

TEST_F(IdxReaderTest, TruncatedGzipStreamIsDataLoss) {
  // Cut a valid gzip file in the middle of its compressed stream.
  const std::string full = Write("full.gz", Images(), /*gzip=*/true);
  FILE* f = std::fopen(full.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::vector<uint8_t> compressed(4096);
  compressed.resize(std::fread(compressed.data(), 1, compressed.size(), f));
  std::fclose(f);
  compressed.resize(compressed.size() / 2);
  const std::string images = Write("cut.gz", compressed, /*gzip=*/false);
  const std::string labels = Write("labels", Labels(), /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss) << data.status();
}

TEST_F(IdxReaderTest, BadMagicIsInvalidArgument) {
  std::vector<uint8_t> bytes = Images();
  bytes[0] = 0x1f;
  const std::string images = Write("images", bytes, /*gzip=*/false);
  const std::string labels = Write("labels", Labels(), /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr(images));
  EXPECT_THAT(data.status().message(), HasSubstr("magic"));
}

TEST_F(IdxReaderTest, UnsupportedTypeIsInvalidArgument) {
  std::vector<uint8_t> bytes = Images();
  bytes[2] = 0x0d;  // float32
  const std::string images = Write("images", bytes, /*gzip=*/false);
  const std::string labels = Write("labels", Labels(), /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr("type"));
}

TEST_F(IdxReaderTest, WrongRankIsInvalidArgument) {
  // Labels and images swapped.
  const std::string images = Write("images", Images(), /*gzip=*/false);
  const std::string labels = Write("labels", Labels(), /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(labels, images, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr("dimensions"));
}

TEST_F(IdxReaderTest, CountMismatchIsInvalidArgument) {
  const std::string images = Write("images", Images(), /*gzip=*/false);
  const std::string labels =
      Write("labels", Concat(Header(0x08, {2}), {7, 0}), /*gzip=*/false);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr(labels));
  EXPECT_THAT(data.status().message(), HasSubstr("2 labels"));
  EXPECT_THAT(data.status().message(), HasSubstr("3 images"));
}

TEST(IdxReaderRealDataTest, ReadsFashionMnistTestSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string images = dir + "t10k-images-idx3-ubyte.gz";
  const std::string labels = dir + "t10k-labels-idx1-ubyte.gz";
  FILE* probe = std::fopen(images.c_str(), "rb");
  if (probe == nullptr) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << dir;
  }
  std::fclose(probe);
  absl::StatusOr<Dataset> data = ReadIdxDataset(images, labels, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->num_samples, 10000);
  ASSERT_EQ(data->dim, 784);
  ASSERT_EQ(data->features.size(), 10000u * 784u);
  std::vector<int> per_class(10, 0);
  for (int32_t label : data->labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 1000) << "class " << c;
  float lo = 1, hi = 0;
  for (float v : data->features) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

}  // namespace
}  // namespace ps

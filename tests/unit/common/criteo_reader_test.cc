// The Criteo reader: labels, the dense transform and the id encoding, with
// missing values; plain and gzip files read in chunks; a clear error naming
// the file, the line and the field for each kind of malformed input.
#include "common/criteo_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/text_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A line: `label`, then the 13 integers and 26 hex values given, the rest
// empty (missing).
std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  ints.resize(kCriteoDenseFeatures);
  cats.resize(kCriteoFields);
  return absl::StrCat(label, "\t", absl::StrJoin(ints, "\t"), "\t",
                      absl::StrJoin(cats, "\t"));
}

// A complete line, different for each `i`.
std::string FullLine(int i) {
  std::vector<std::string> ints, cats;
  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    ints.push_back(absl::StrCat((i * 7 + j) % 50 - 2));
  }
  for (int f = 0; f < kCriteoFields; ++f) {
    cats.push_back(absl::StrFormat("%08x", (i * 2654435761u) ^ f));
  }
  return Line(i % 2 ? "1" : "0", ints, cats);
}

TEST(CriteoIdTest, IsABijectionWithAMissingIdPerField) {
  EXPECT_EQ(CriteoId(0, 0), uint64_t{1} << 32);
  EXPECT_EQ(CriteoId(25, 0xffffffffu), (uint64_t{25} << 33) | 0x1ffffffffu);
  EXPECT_EQ(CriteoMissingId(0), 0u);
  EXPECT_EQ(CriteoMissingId(3), uint64_t{3} << 33);
  // Neighbours never collide: field 0's largest value, field 1's missing.
  EXPECT_NE(CriteoId(0, 0xffffffffu), CriteoMissingId(1));
  EXPECT_LT(CriteoId(0, 0xffffffffu), CriteoMissingId(1));
  EXPECT_NE(CriteoId(1, 0), CriteoMissingId(1));
}

TEST(CriteoReaderTest, ReadsLabelsDenseValuesAndIdsWithMissingValues) {
  const std::string text = absl::StrCat(
      Line("1", {"0", "-3", "5", "", "1000000"}, {"68fd1e64", "", "A", "0"}),
      "\r\n\n", Line("0", {}, {}), "\n");
  auto data = ParseCriteoText(text, "d.tsv");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size(), 2);
  EXPECT_EQ(data->num_dense, 13);
  EXPECT_EQ(data->num_fields, 26);
  EXPECT_THAT(data->labels, ElementsAre(1, 0));
  ASSERT_EQ(data->dense.size(), 26u);
  ASSERT_EQ(data->ids.size(), 52u);
  // log(1 + max(x, 0)); missing is 0.
  EXPECT_EQ(data->dense[0], 0.0f);
  EXPECT_EQ(data->dense[1], 0.0f);
  EXPECT_THAT(data->dense[2], FloatEq(std::log(6.0f)));
  EXPECT_EQ(data->dense[3], 0.0f);
  EXPECT_THAT(data->dense[4], FloatEq(static_cast<float>(std::log1p(1e6))));
  for (int j = 5; j < 26; ++j) EXPECT_EQ(data->dense[j], 0.0f) << j;
  EXPECT_EQ(data->ids[0], CriteoId(0, 0x68fd1e64));
  EXPECT_EQ(data->ids[1], CriteoMissingId(1));
  EXPECT_EQ(data->ids[2], CriteoId(2, 0xa));
  EXPECT_EQ(data->ids[3], CriteoId(3, 0));
  for (int f = 4; f < 26; ++f) EXPECT_EQ(data->ids[f], CriteoMissingId(f));
  for (int f = 0; f < 26; ++f) {
    EXPECT_EQ(data->ids[26 + f], CriteoMissingId(f));
  }
}

TEST(CriteoReaderTest, StopsAtMaxSamples) {
  const std::string text =
      absl::StrCat(FullLine(0), "\n", FullLine(1), "\n", FullLine(2));
  auto all = ParseCriteoText(text, "d.tsv");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 3);  // The last line needs no '\n'.
  auto two = ParseCriteoText(text, "d.tsv", 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->size(), 2);
  EXPECT_THAT(two->labels, ElementsAre(0, 1));
  EXPECT_EQ(two->ids.size(), 52u);
  // A malformed line past max_samples is never read.
  auto before_bad =
      ParseCriteoText(absl::StrCat(FullLine(0), "\nbad\n"), "d.tsv", 1);
  EXPECT_TRUE(before_bad.ok()) << before_bad.status();
}

TEST(CriteoReaderTest, MalformedInputNamesTheLineAndTheField) {
  const std::string good = FullLine(1);
  const struct {
    std::string text;
    const char* message;
  } cases[] = {
      {absl::StrCat(good, "\n", good, "\tx\n"),
       "d.tsv:2: expected 40 tab-separated fields (the label, 13 integers, "
       "26 categorical values), got 41"},
      {"1\t2\t3\n", "d.tsv:1: expected 40 tab-separated fields"},
      {Line("2", {}, {}), "d.tsv:1: the label is not 0 or 1 (\"2\")"},
      {Line("", {}, {}), "d.tsv:1: the label is not 0 or 1"},
      {Line("01", {}, {}), "d.tsv:1: the label is not 0 or 1 (\"01\")"},
      {Line("1", {"", "", "1.5"}, {}),
       "d.tsv:1: I3 is not an integer (\"1.5\")"},
      {Line("1", {"x"}, {}), "d.tsv:1: I1 is not an integer (\"x\")"},
      {Line("1", {"", " 4"}, {}), "d.tsv:1: I2 is not an integer (\" 4\")"},
      {Line("1", {"99999999999999999999"}, {}),
       "d.tsv:1: I1 is not an integer"},
      {Line("1", {}, {"", "", "", "", "12g4"}),
       "d.tsv:1: C5 is not hexadecimal (\"12g4\")"},
      {Line("1", {}, {"-1"}), "d.tsv:1: C1 is not hexadecimal (\"-1\")"},
      {Line("1", {}, {"", "123456789"}),
       "d.tsv:1: C2 is over 32 bits (\"123456789\")"},
      {"\n\r\n", "d.tsv: no samples"},
      {"", "d.tsv: no samples"},
      {std::string((1 << 20) + 1, '1'),
       "d.tsv:1: the line is longer than 1048576 bytes"},
  };
  for (const auto& c : cases) {
    auto data = ParseCriteoText(c.text, "d.tsv");
    ASSERT_FALSE(data.ok()) << c.text.substr(0, 80);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(data.status().message()), StartsWith(c.message))
        << c.text.substr(0, 80);
  }
}

TEST(CriteoReaderTest, LongButValidFieldsReadAsTheirShortForms) {
  // Leading zeros are not more bits or more digits; upper-case digits are
  // hex. (These lines take the reader's general path, the short forms its
  // fast one.)
  auto padded = ParseCriteoText(
      Line("1", {"-0000000000000000000007", "00000000000000000000012"},
           {"000FFFFFFFF", "0000000000a"}),
      "d.tsv");
  auto plain =
      ParseCriteoText(Line("1", {"-7", "12"}, {"ffffffff", "a"}), "d.tsv");
  ASSERT_TRUE(padded.ok()) << padded.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(padded->ids[0], CriteoId(0, 0xffffffffu));
  EXPECT_EQ(padded->ids[1], CriteoId(1, 0xa));
  EXPECT_THAT(padded->dense[1], FloatEq(std::log(13.0f)));
  EXPECT_EQ(padded->labels, plain->labels);
  EXPECT_EQ(padded->dense, plain->dense);
  EXPECT_EQ(padded->ids, plain->ids);
}

// A plain reference parser of one line (no '\n'): its label, dense values
// and ids, or nullopt when the reader must refuse it.
struct Row {
  int32_t label;
  std::vector<float> dense;
  std::vector<uint64_t> ids;
};
std::optional<Row> ReferenceParse(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string> fields = absl::StrSplit(line, '\t');
  if (fields.size() != 40 || (fields[0] != "0" && fields[0] != "1")) {
    return std::nullopt;
  }
  Row row{fields[0] == "1" ? 1 : 0, {}, {}};
  for (int j = 1; j <= 13; ++j) {
    const std::string& field = fields[j];
    int64_t x = 0;
    const auto [ptr, ec] =
        std::from_chars(field.data(), field.data() + field.size(), x);
    if (!field.empty() &&
        (ec != std::errc() || ptr != field.data() + field.size())) {
      return std::nullopt;
    }
    row.dense.push_back(
        static_cast<float>(std::log1p(std::max<int64_t>(x, 0))));
  }
  for (int f = 0; f < 26; ++f) {
    const std::string& field = fields[14 + f];
    if (field.empty()) {
      row.ids.push_back(CriteoMissingId(f));
      continue;
    }
    uint64_t value = 0;
    for (const char c : field) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
      value = value * 16 + std::stoul(std::string(1, c), nullptr, 16);
      if (value > 0xffffffffu) return std::nullopt;
    }
    row.ids.push_back(CriteoId(f, static_cast<uint32_t>(value)));
  }
  return row;
}

TEST(CriteoReaderTest, AgreesWithAReferenceParserOnMutatedLines) {
  std::mt19937 rng(27);
  const std::string alphabet = "0123456789abcdefABCDEFxg-+ \t\r";
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string line = trial % 3 == 0
                           ? Line("1", {"-1", "", "7"}, {"", "ab", "0"})
                           : FullLine(trial);
    for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
      const size_t at = rng() % (line.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          if (at < line.size()) line[at] = c;
          break;
        case 1:
          line.insert(line.begin() + at, c);
          break;
        default:
          if (at < line.size()) line.erase(at, 1);
      }
    }
    const std::optional<Row> expected = ReferenceParse(line);
    auto data = ParseCriteoText(line, "d.tsv");
    ASSERT_EQ(data.ok(), expected.has_value())
        << "\"" << absl::CEscape(line) << "\" " << data.status();
    if (!expected) continue;
    ++accepted;
    ASSERT_EQ(data->size(), 1);
    EXPECT_EQ(data->labels[0], expected->label) << absl::CEscape(line);
    EXPECT_EQ(data->dense, expected->dense) << absl::CEscape(line);
    EXPECT_EQ(data->ids, expected->ids) << absl::CEscape(line);
  }
  // Both outcomes were exercised.
  EXPECT_GT(accepted, 1000);
  EXPECT_LT(accepted, 19000);
}

class CriteoFilesTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text,
                    bool gzip) {
    std::string path = dir_.File(name);
    testing::WriteDataFile(path, text, gzip);
    return path;
  }

  testing::ScopedTempDir dir_{"criteo_reader"};
};

TEST_F(CriteoFilesTest, ReadsPlainAndGzipFilesAcrossChunks) {
  // About 9 MB: more than two of the reader's 4 MiB chunks, so lines
  // straddle chunk boundaries.
  std::string text;
  for (int i = 0; i < 30000; ++i) absl::StrAppend(&text, FullLine(i), "\n");
  auto expected = ParseCriteoText(text, "text");
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(expected->size(), 30000);
  for (const bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string path = Write(gzip ? "d.tsv.gz" : "d.tsv", text, gzip);
    auto data = ReadCriteoFile(path);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->labels, expected->labels);
    EXPECT_EQ(data->dense, expected->dense);
    EXPECT_EQ(data->ids, expected->ids);
    auto some = ReadCriteoFile(path, 25000);
    ASSERT_TRUE(some.ok()) << some.status();
    ASSERT_EQ(some->size(), 25000);
    EXPECT_EQ(some->ids.back(), expected->ids[25000 * 26 - 1]);
  }
}

TEST_F(CriteoFilesTest, ShardsPartitionTheSamplesAcrossWorkers) {
  std::string text;
  for (int i = 0; i < 10001; ++i) absl::StrAppend(&text, FullLine(i), "\n");
  auto all = ParseCriteoText(text, "text");
  ASSERT_TRUE(all.ok()) << all.status();
  const std::string path = Write("shards.tsv", text, /*gzip=*/false);
  constexpr int kParts = 3;
  int64_t kept = 0;
  for (int part = 0; part < kParts; ++part) {
    auto shard = ReadCriteoFile(path, 0, {.part = part, .num_parts = kParts});
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->source_samples, 10001);
    // Sample j of shard `part` is sample part + j * kParts of the file.
    for (int64_t j = 0; j < shard->size(); ++j) {
      const int64_t i = part + j * kParts;
      ASSERT_EQ(shard->labels[j], all->labels[i]);
      ASSERT_EQ(shard->ids[j * kCriteoFields], all->ids[i * kCriteoFields]);
      ASSERT_EQ(shard->dense[j * kCriteoDenseFeatures + 3],
                all->dense[i * kCriteoDenseFeatures + 3]);
    }
    kept += shard->size();
  }
  EXPECT_EQ(kept, 10001);
  // max_samples counts the file's samples, whatever the shard keeps.
  auto first = ReadCriteoFile(path, 100, {.part = 1, .num_parts = 4});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 25);
  EXPECT_EQ(first->source_samples, 100);
  EXPECT_EQ(
      ReadCriteoFile(path, 0, {.part = 2, .num_parts = 2}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// A stream gives a shard's samples in file order, in pieces of any size
// (across the 4 MiB chunks, plain and gzip), as ReadCriteoFile does whole.
TEST_F(CriteoFilesTest, StreamGivesTheShardsSamplesInPieces) {
  std::string text;
  for (int i = 0; i < 30001; ++i) absl::StrAppend(&text, FullLine(i), "\n");
  for (const bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string path = Write(gzip ? "s.tsv.gz" : "s.tsv", text, gzip);
    for (const int64_t max_samples : {int64_t{0}, int64_t{20000}}) {
      const CriteoShard shard = {.part = 1, .num_parts = 2};
      auto whole = ReadCriteoFile(path, max_samples, shard);
      ASSERT_TRUE(whole.ok()) << whole.status();
      auto stream = CriteoStream::Open(path, max_samples, shard);
      ASSERT_TRUE(stream.ok()) << stream.status();
      CtrDataset piece, all;
      for (int64_t count = 1; !stream->done(); count = count * 3 + 1) {
        ASSERT_TRUE(stream->Next(count, &piece).ok());
        EXPECT_LE(piece.size(), count);
        all.labels.insert(all.labels.end(), piece.labels.begin(),
                          piece.labels.end());
        all.dense.insert(all.dense.end(), piece.dense.begin(),
                         piece.dense.end());
        all.ids.insert(all.ids.end(), piece.ids.begin(), piece.ids.end());
      }
      EXPECT_EQ(all.labels, whole->labels);
      EXPECT_EQ(all.dense, whole->dense);
      EXPECT_EQ(all.ids, whole->ids);
      EXPECT_EQ(stream->source_samples(), whole->source_samples);
      ASSERT_TRUE(stream->Next(5, &piece).ok());  // At the end: nothing.
      EXPECT_EQ(piece.size(), 0);
    }
  }
  EXPECT_EQ(CriteoStream::Open(dir_.File("absent.tsv")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CriteoFilesTest, FileErrorsNameThePathAndTheLine) {
  auto missing = ReadCriteoFile(dir_.File("absent.tsv"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("absent.tsv"));

  std::string text;
  for (int i = 0; i < 20000; ++i) absl::StrAppend(&text, FullLine(i), "\n");
  absl::StrAppend(&text, Line("1", {}, {"", "", "zz"}), "\n");
  const std::string path = Write("bad.tsv.gz", text, true);
  auto bad = ReadCriteoFile(path);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              StartsWith(absl::StrCat(path, ":20001: C3 is not hexadecimal")));

  // A gzip stream cut short.
  std::string gz_bytes;
  {
    const std::string whole = Write("whole.tsv.gz", text, true);
    FILE* f = std::fopen(whole.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char chunk[4096];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) {
      gz_bytes.append(chunk, n);
    }
    std::fclose(f);
  }
  const std::string cut =
      Write("cut.tsv.gz", gz_bytes.substr(0, gz_bytes.size() / 2), false);
  auto truncated = ReadCriteoFile(cut);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss)
      << truncated.status();
  // zlib reads a cut stream as an early end with an error set: whole-file
  // reads (the CSV and libsvm readers') see it too.
  EXPECT_EQ(ReadTextFile(cut).status().code(), absl::StatusCode::kDataLoss);

  // A line longer than 1 MiB in a file.
  const std::string long_line =
      Write("long.tsv", std::string(3 << 20, '1'), false);
  auto too_long = ReadCriteoFile(long_line);
  EXPECT_THAT(std::string(too_long.status().message()),
              StartsWith(absl::StrCat(
                  long_line, ":1: the line is longer than 1048576 bytes")));
}

}  // namespace
}  // namespace ps

#include "common/criteo_reader.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/text_file.h"
#include "common/text_parse.h"

namespace ps {
namespace {

constexpr int kColumns = 1 + kCriteoDenseFeatures + kCriteoFields;
constexpr size_t kMaxLineBytes = size_t{1} << 20;
constexpr size_t kReadChunk = size_t{4} << 20;

// log(1 + x) as a float, from a table for the small integers most values
// are.
class DenseTransform {
 public:
  DenseTransform() {
    for (int x = 0; x < kTable; ++x) table_[x] = Compute(x);
  }
  float operator()(int64_t x) const {
    if (x <= 0) return 0.0f;
    return x < kTable ? table_[x] : Compute(x);
  }

 private:
  static constexpr int kTable = 4096;
  static float Compute(int64_t x) {
    return static_cast<float>(std::log1p(static_cast<double>(x)));
  }
  std::array<float, kTable> table_;
};

const DenseTransform& Transform() {
  static const DenseTransform* const transform = new DenseTransform();
  return *transform;
}

// Hex digits' values; 0x80 for a byte that is not one.
constexpr std::array<uint8_t, 256> kHexDigits = [] {
  std::array<uint8_t, 256> table{};
  for (uint8_t& entry : table) entry = 0x80;
  for (int c = '0'; c <= '9'; ++c) table[c] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) {
    table[c] = table[c - 'a' + 'A'] = static_cast<uint8_t>(c - 'a' + 10);
  }
  return table;
}();

// The value of hex digit `c`, or -1.
int HexDigit(char c) {
  const uint8_t digit = kHexDigits[static_cast<unsigned char>(c)];
  return digit & 0x80 ? -1 : digit;
}

// Splits `line` at tabs into `fields`; returns the number of fields (which
// may exceed kColumns: only the first kColumns are stored).
int SplitTabs(absl::string_view line,
              std::array<absl::string_view, kColumns>* fields) {
  int count = 0;
  const char* p = line.data();
  const char* const end = p + line.size();
  while (true) {
    const void* tab = std::memchr(p, '\t', end - p);
    const char* stop = tab == nullptr ? end : static_cast<const char*>(tab);
    if (count < kColumns) (*fields)[count] = absl::string_view(p, stop - p);
    ++count;
    if (tab == nullptr) return count;
    p = stop + 1;
  }
}

// Parses Criteo lines into a CtrDataset.
class CriteoParser {
 public:
  CriteoParser(absl::string_view name, int64_t max_samples,
               CriteoShard shard = {})
      : name_(name), max_samples_(max_samples), shard_(shard) {}

  // Makes room for `rows` samples of the source in all (at most
  // max_samples), of which this shard keeps its part.
  void Reserve(int64_t rows) {
    if (max_samples_ > 0) rows = std::min(rows, max_samples_);
    rows = rows / shard_.num_parts + 1;
    data_.labels.reserve(rows);
    data_.dense.reserve(rows * kCriteoDenseFeatures);
    data_.ids.reserve(rows * kCriteoFields);
  }
  // Samples of the source seen so far (this shard's and the others').
  int64_t source_rows() const { return data_.source_samples; }
  // Whether max_samples samples of the source have been seen.
  bool full() const {
    return max_samples_ > 0 && data_.source_samples >= max_samples_;
  }

  // Parses the lines of `chunk` that end in '\n' (all of them, the last
  // one unterminated included, when `at_end`), stopping when full() or once
  // the shard holds `keep` samples; the bytes consumed. Errors: see
  // ParseCriteoText.
  absl::StatusOr<size_t> Consume(absl::string_view chunk, bool at_end,
                                 int64_t keep = INT64_MAX) {
    size_t pos = 0;
    bool unfinished = false;  // Stopped at a line without its '\n'.
    while (pos < chunk.size() && !full() && data_.size() < keep) {
      const void* nl =
          std::memchr(chunk.data() + pos, '\n', chunk.size() - pos);
      const size_t end = nl == nullptr
                             ? chunk.size()
                             : static_cast<const char*>(nl) - chunk.data();
      if (nl == nullptr && !at_end) {
        unfinished = true;
        break;
      }
      absl::string_view line = chunk.substr(pos, end - pos);
      pos = nl == nullptr ? end : end + 1;
      ++line_number_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (line.size() > kMaxLineBytes) return LineTooLong(line_number_);
      // Another shard's sample: counted, not parsed.
      if (data_.source_samples++ % shard_.num_parts != shard_.part) continue;
      if (ParseWellFormedLine(line)) continue;
      if (auto s = ParseLine(line); !s.ok()) return s;
    }
    if (unfinished && chunk.size() - pos > kMaxLineBytes) {
      return LineTooLong(line_number_ + 1);
    }
    return pos;
  }

  // The samples parsed so far (a stream takes them and leaves the vectors
  // empty; source_samples keeps counting).
  CtrDataset& data() { return data_; }

  // The samples parsed. Errors: INVALID_ARGUMENT "NAME: no samples".
  absl::StatusOr<CtrDataset> Finish() && {
    if (data_.size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": no samples"));
    }
    return std::move(data_);
  }

 private:
  // The fast path: parses and appends `line` when it is well formed and
  // simple (integers of at most 18 digits), else appends nothing and
  // returns false (ParseLine then parses it or says what is wrong).
  bool ParseWellFormedLine(absl::string_view line);
  // Parses and appends `line`, or says what is wrong with it.
  absl::Status ParseLine(absl::string_view line);
  absl::Status LineTooLong(int64_t line) const {
    return text_parse::LineError(
        name_, line,
        absl::StrCat("the line is longer than ", kMaxLineBytes, " bytes"));
  }
  absl::Status Error(absl::string_view what, absl::string_view field) const {
    return text_parse::LineError(name_, line_number_, what, field);
  }

  std::string name_;
  int64_t max_samples_;
  CriteoShard shard_;
  int64_t line_number_ = 0;
  CtrDataset data_;
  const DenseTransform& transform_ = Transform();
};

bool CriteoParser::ParseWellFormedLine(absl::string_view line) {
  const char* p = line.data();
  const char* const end = p + line.size();
  if (line.size() < 2 || (p[0] != '0' && p[0] != '1') || p[1] != '\t') {
    return false;
  }
  const int32_t label = p[0] - '0';
  p += 2;
  std::array<float, kCriteoDenseFeatures> dense;
  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    // Unsigned: a run of more than 18 digits wraps (defined) before the
    // check below sends the line the slow way.
    uint64_t x = 0;
    const bool negative = p < end && *p == '-';
    const char* const digits = p + (negative ? 1 : 0);
    const char* q = digits;
    while (q < end && static_cast<unsigned>(*q - '0') < 10) {
      x = x * 10 + static_cast<uint64_t>(*q - '0');
      ++q;
    }
    // Ends in a tab; "-" alone or over 18 digits go the slow way.
    if (q == end || *q != '\t' || q - digits > 18 ||
        (negative && q == digits)) {
      return false;
    }
    const int64_t value = static_cast<int64_t>(x);  // At most 18 digits.
    dense[j] = transform_(negative ? -value : value);
    p = q + 1;
  }
  std::array<uint64_t, kCriteoFields> ids;
  for (int f = 0; f < kCriteoFields; ++f) {
    const bool last = f == kCriteoFields - 1;
    if (end - p >= 8 && (last ? end - p == 8 : end - p > 8 && p[8] == '\t')) {
      // The common case, 8 digits: no branch on each.
      uint32_t value = 0;
      uint8_t bad = 0;
      for (int k = 0; k < 8; ++k) {
        const uint8_t digit = kHexDigits[static_cast<unsigned char>(p[k])];
        bad |= digit;
        value = (value << 4) | (digit & 0xF);
      }
      if (bad & 0x80) return false;
      ids[f] = CriteoId(f, value);
      p += 9;
      continue;
    }
    uint32_t value = 0;
    const char* q = p;
    while (q < end && q - p < 8 && HexDigit(*q) >= 0) {
      value = (value << 4) | static_cast<uint32_t>(HexDigit(*q));
      ++q;
    }
    if (last ? q != end : q == end || *q != '\t') return false;
    ids[f] = q == p ? CriteoMissingId(f) : CriteoId(f, value);
    p = q + 1;
  }
  data_.labels.push_back(label);
  data_.dense.insert(data_.dense.end(), dense.begin(), dense.end());
  data_.ids.insert(data_.ids.end(), ids.begin(), ids.end());
  return true;
}

absl::Status CriteoParser::ParseLine(absl::string_view line) {
  std::array<absl::string_view, kColumns> fields;
  const int count = SplitTabs(line, &fields);
  if (count != kColumns) {
    return Error(
        absl::StrCat("expected ", kColumns,
                     " tab-separated fields (the label, ", kCriteoDenseFeatures,
                     " integers, ", kCriteoFields, " categorical values), got ",
                     count),
        {});
  }
  if (fields[0] != "0" && fields[0] != "1") {
    return Error("the label is not 0 or 1", fields[0]);
  }
  std::array<float, kCriteoDenseFeatures> dense;
  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    const absl::string_view field = fields[1 + j];
    int64_t x = 0;
    if (!field.empty()) {
      const auto [ptr, ec] =
          std::from_chars(field.data(), field.data() + field.size(), x);
      if (ec != std::errc() || ptr != field.data() + field.size()) {
        return Error(absl::StrCat("I", j + 1, " is not an integer"), field);
      }
    }
    dense[j] = transform_(x);
  }
  std::array<uint64_t, kCriteoFields> ids;
  for (int f = 0; f < kCriteoFields; ++f) {
    const absl::string_view field = fields[1 + kCriteoDenseFeatures + f];
    if (field.empty()) {
      ids[f] = CriteoMissingId(f);
      continue;
    }
    uint64_t value = 0;
    for (const char c : field) {
      const int digit = HexDigit(c);
      if (digit < 0) {
        return Error(absl::StrCat("C", f + 1, " is not hexadecimal"), field);
      }
      value = (value << 4) | static_cast<uint64_t>(digit);
      if (value > 0xFFFFFFFFu) {
        return Error(absl::StrCat("C", f + 1, " is over 32 bits"), field);
      }
    }
    ids[f] = CriteoId(f, static_cast<uint32_t>(value));
  }
  data_.labels.push_back(fields[0][0] - '0');
  data_.dense.insert(data_.dense.end(), dense.begin(), dense.end());
  data_.ids.insert(data_.ids.end(), ids.begin(), ids.end());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CtrDataset> ParseCriteoText(absl::string_view text,
                                           absl::string_view name,
                                           int64_t max_samples) {
  CriteoParser parser(name, max_samples);
  if (auto consumed = parser.Consume(text, /*at_end=*/true); !consumed.ok()) {
    return consumed.status();
  }
  return std::move(parser).Finish();
}

namespace {

absl::Status CheckShard(const CriteoShard& shard) {
  if (shard.num_parts < 1 || shard.part < 0 || shard.part >= shard.num_parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("criteo shard ", shard.part, " of ", shard.num_parts));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CtrDataset> ReadCriteoFile(const std::string& path,
                                          int64_t max_samples,
                                          CriteoShard shard) {
  if (auto s = CheckShard(shard); !s.ok()) return s;
  auto file = TextFileReader::Open(path);
  if (!file.ok()) return file.status();
  CriteoParser parser(path, max_samples, shard);
  std::string buffer(kReadChunk, '\0');
  size_t have = 0;  // Bytes of an unfinished line at the buffer's start.
  bool at_end = false, reserved = false;
  while (!at_end && !parser.full()) {
    auto got = file->Read(buffer.data() + have, buffer.size() - have);
    if (!got.ok()) return got.status();
    at_end = *got == 0;
    const size_t filled = have + *got;
    auto consumed =
        parser.Consume(absl::string_view(buffer.data(), filled), at_end);
    if (!consumed.ok()) return consumed.status();
    have = filled - *consumed;
    std::memmove(buffer.data(), buffer.data() + *consumed, have);
    if (!reserved && parser.source_rows() > 0 && file->bytes_used() > 0) {
      // Room for the whole file, estimated from its first chunk (its
      // compressed bytes for gzip), saves the vectors' regrowth.
      reserved = true;
      const double rows_per_byte = static_cast<double>(parser.source_rows()) /
                                   static_cast<double>(file->bytes_used());
      parser.Reserve(static_cast<int64_t>(
          1.05 * rows_per_byte * static_cast<double>(file->size_on_disk())));
    }
  }
  return std::move(parser).Finish();
}

// The state of a CriteoStream: the file, the parser and its read buffer.
struct CriteoStream::State {
  State(TextFileReader f, const std::string& path, int64_t max_samples,
        CriteoShard shard)
      : file(std::move(f)),
        parser(path, max_samples, shard),
        buffer(kReadChunk, '\0') {}
  TextFileReader file;
  CriteoParser parser;
  std::string buffer;
  size_t have = 0;      // Unparsed bytes at the buffer's start.
  bool at_end = false;  // The file has no more bytes.
};

CriteoStream::CriteoStream(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
CriteoStream::~CriteoStream() = default;
CriteoStream::CriteoStream(CriteoStream&&) noexcept = default;
CriteoStream& CriteoStream::operator=(CriteoStream&&) noexcept = default;

absl::StatusOr<CriteoStream> CriteoStream::Open(const std::string& path,
                                                int64_t max_samples,
                                                CriteoShard shard) {
  if (auto s = CheckShard(shard); !s.ok()) return s;
  auto file = TextFileReader::Open(path);
  if (!file.ok()) return file.status();
  return CriteoStream(
      std::make_unique<State>(*std::move(file), path, max_samples, shard));
}

int64_t CriteoStream::source_samples() const {
  return state_->parser.source_rows();
}

bool CriteoStream::done() const {
  return state_->parser.full() || (state_->at_end && state_->have == 0);
}

absl::Status CriteoStream::Next(int64_t count, CtrDataset* out) {
  State& st = *state_;
  CtrDataset& data = st.parser.data();
  // The parser appends into out's vectors (their capacity reused).
  data.labels.swap(out->labels);
  data.dense.swap(out->dense);
  data.ids.swap(out->ids);
  data.labels.clear();
  data.dense.clear();
  data.ids.clear();
  absl::Status status;
  while (status.ok() && data.size() < count && !done()) {
    // What the buffer holds first (a call that stopped at `count` left
    // whole lines there), then more of the file.
    auto consumed = st.parser.Consume(
        absl::string_view(st.buffer.data(), st.have), st.at_end, count);
    if (!consumed.ok()) {
      status = consumed.status();
      break;
    }
    st.have -= *consumed;
    std::memmove(st.buffer.data(), st.buffer.data() + *consumed, st.have);
    if (data.size() >= count || st.at_end || st.parser.full()) break;
    // Only an unfinished line (at most kMaxLineBytes) is left: room to read.
    auto got =
        st.file.Read(st.buffer.data() + st.have, st.buffer.size() - st.have);
    if (!got.ok()) {
      status = got.status();
      break;
    }
    st.at_end = *got == 0;
    st.have += *got;
  }
  data.labels.swap(out->labels);
  data.dense.swap(out->dense);
  data.ids.swap(out->ids);
  out->num_dense = data.num_dense;
  out->num_fields = data.num_fields;
  out->source_samples = data.source_samples;
  return status;
}

}  // namespace ps

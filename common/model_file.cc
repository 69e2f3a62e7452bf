#include "common/model_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model_layout.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace {

constexpr size_t kMagicSize = sizeof(kModelFileMagic) - 1;
static_assert(kMagicSize == 8);
// A header is a few hundred bytes per tensor; a larger length is corruption.
constexpr uint32_t kMaxHeaderBytes = 64 << 20;

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<FILE, FileCloser>;

absl::Status ErrnoError(int error, const std::string& what) {
  return absl::ErrnoToStatus(error, what);
}

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("model file ", path, " is damaged: ", what));
}

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

void EncodeUint32(uint32_t v, char out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t DecodeUint32(const unsigned char in[4]) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 |
         uint32_t{in[3]} << 24;
}

// Writes all of `data` or returns an errno status.
absl::Status WriteAll(FILE* f, const char* data, size_t n,
                      const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n) {
    return ErrnoError(errno, absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTrainedModel(const v1::TrainedModel& model) {
  PS_ASSIGN_OR_RETURN(auto expected, ModelTensors(model.model()));
  if (model.tensors_size() != static_cast<int>(expected.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors: the model has ", expected.size(),
                     " tensors, not ", model.tensors_size()));
  }
  for (int i = 0; i < model.tensors_size(); ++i) {
    const v1::Tensor& t = model.tensors(i);
    const TensorSpec& want = expected[i];
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    if (t.name() != want.name || shape != want.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors[", i, "]: expected ", want.name, " [",
                       absl::StrJoin(want.shape, ", "), "], got ", t.name(),
                       " ", ShapeString(t.shape())));
    }
    if (static_cast<int64_t>(t.data().size()) !=
        want.num_elems() * static_cast<int64_t>(sizeof(float))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors[", i, "] (", t.name(), "): ", t.data().size(),
          " bytes of data, expected ", want.num_elems() * sizeof(float)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeModelFileHead(const v1::TrainedModel& model,
                                                bool with_tables) {
  // The header: everything but the tensor data.
  v1::TrainedModel header = model;
  for (int i = 0; i < header.tensors_size(); ++i) {
    v1::Tensor* t = header.mutable_tensors(i);
    int64_t elems = 1;
    for (int64_t d : t->shape()) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensors[", i, "] (", t->name(), "): negative shape ",
                         ShapeString(t->shape())));
      }
      elems *= d;
    }
    if (static_cast<int64_t>(t->data().size()) !=
        elems * static_cast<int64_t>(sizeof(float))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors[", i, "] (", t->name(), "): shape ", ShapeString(t->shape()),
          " needs ", elems * sizeof(float), " bytes of data, not ",
          t->data().size()));
    }
    t->clear_data();
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  if (auto s =
          google::protobuf::util::MessageToJsonString(header, &json, options);
      !s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode the model header: ", s.ToString()));
  }
  json += '\n';  // So that `head -c` of a file shows the header cleanly.
  if (json.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model header of ", json.size(), " bytes is too large"));
  }
  char length[4];
  EncodeUint32(static_cast<uint32_t>(json.size()), length);
  return absl::StrCat(
      absl::string_view(with_tables ? kModelFileTablesMagic : kModelFileMagic,
                        kMagicSize),
      absl::string_view(length, sizeof(length)), json);
}

absl::Status WriteModelFile(const v1::TrainedModel& model,
                            const std::string& path) {
  PS_ASSIGN_OR_RETURN(const std::string head,
                      EncodeModelFileHead(model, /*with_tables=*/false));
  const std::string tmp = absl::StrCat(path, ".tmp");
  File f(std::fopen(tmp.c_str(), "wb"));
  if (f == nullptr) {
    return ErrnoError(errno, absl::StrCat("cannot create ", tmp));
  }
  absl::Status s = WriteAll(f.get(), head.data(), head.size(), tmp);
  for (int i = 0; s.ok() && i < model.tensors_size(); ++i) {
    const std::string& data = model.tensors(i).data();
    s = WriteAll(f.get(), data.data(), data.size(), tmp);
  }
  if (s.ok() && (std::fflush(f.get()) != 0 || ::fsync(fileno(f.get())) != 0)) {
    s = ErrnoError(errno, absl::StrCat("cannot write ", tmp));
  }
  if (s.ok() && std::fclose(f.release()) != 0) {
    s = ErrnoError(errno, absl::StrCat("cannot write ", tmp));
  }
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoError(errno, absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  if (!s.ok()) {
    f.reset();
    std::remove(tmp.c_str());
  }
  return s;
}

namespace {

// The bytes of each tensor's data, from the shapes in the header of the
// model file at `path`: every tensor's size must fit in what is left; then
// the sizes must add up to exactly the `data_size` bytes after the header.
absl::StatusOr<std::vector<int64_t>> TensorDataBytes(
    const v1::TrainedModel& model, int64_t data_size, bool with_tables,
    const std::string& path) {
  int64_t total = 0;
  std::vector<int64_t> bytes(model.tensors_size());
  for (int i = 0; i < model.tensors_size(); ++i) {
    const v1::Tensor& t = model.tensors(i);
    if (!t.data().empty()) {
      return Corrupt(path, absl::StrCat("tensors[", i, "] (", t.name(),
                                        ") has data in the header"));
    }
    int64_t elems = 1;
    for (int64_t d : t.shape()) {
      if (d < 0 || (d > 0 && elems > data_size / d)) {
        return Corrupt(
            path, absl::StrCat("tensors[", i, "] (", t.name(), ") has shape ",
                               ShapeString(t.shape()), ", larger than the ",
                               data_size, " bytes of data"));
      }
      elems *= d;
    }
    bytes[i] = elems * static_cast<int64_t>(sizeof(float));
    total += bytes[i];
    if (total > data_size) {
      return Corrupt(
          path, absl::StrCat("the header's shapes need more than ", data_size,
                             " bytes of data (truncated "
                             "at tensors[",
                             i, "], ", t.name(), ")"));
    }
  }
  // A table section ends with at least its 16-byte end marker.
  if (with_tables && total + 16 > data_size) {
    return Corrupt(
        path, absl::StrCat("the header's shapes need ", total,
                           " bytes of data, and a ", kModelFileTablesMagic,
                           " file's table section at least 16 "
                           "more (a ",
                           kModelFileMagic,
                           " file has none), but the file has ", data_size));
  }
  if (!with_tables && total != data_size) {
    return Corrupt(
        path, absl::StrCat("the header's shapes need ", total,
                           " bytes of data, but the file has ", data_size));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<v1::TrainedModel> ReadModelFile(const std::string& path,
                                               ModelFileLayout* layout) {
  File f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr) {
    return ErrnoError(errno, absl::StrCat("cannot open model file ", path));
  }
  if (std::fseek(f.get(), 0, SEEK_END) != 0) {
    return ErrnoError(errno, absl::StrCat("cannot read model file ", path));
  }
  const long file_size = std::ftell(f.get());
  if (file_size < 0 || std::fseek(f.get(), 0, SEEK_SET) != 0) {
    return ErrnoError(errno, absl::StrCat("cannot read model file ", path));
  }
  // Reads exactly n bytes, or says why not.
  auto read = [&](void* out, size_t n, const char* what) -> absl::Status {
    if (n == 0 || std::fread(out, 1, n, f.get()) == n) return absl::OkStatus();
    if (std::ferror(f.get())) {
      return ErrnoError(errno, absl::StrCat("cannot read model file ", path));
    }
    return Corrupt(path, absl::StrCat("truncated in ", what));
  };

  char magic[kMagicSize];
  PS_RETURN_IF_ERROR(read(magic, kMagicSize, "the magic"));
  const bool with_tables =
      std::memcmp(magic, kModelFileTablesMagic, kMagicSize) == 0;
  if (!with_tables && std::memcmp(magic, kModelFileMagic, kMagicSize) != 0) {
    return Corrupt(
        path,
        absl::StrCat("it does not start with \"", kModelFileMagic, "\" or \"",
                     kModelFileTablesMagic, "\" (not a model file?)"));
  }
  unsigned char length_bytes[4];
  PS_RETURN_IF_ERROR(read(length_bytes, 4, "the header length"));
  const uint32_t header_size = DecodeUint32(length_bytes);
  const int64_t data_start = kMagicSize + 4 + int64_t{header_size};
  if (header_size > kMaxHeaderBytes || data_start > file_size) {
    return Corrupt(path,
                   absl::StrCat("header length ", header_size,
                                " exceeds the file's ", file_size, " bytes"));
  }
  std::string json(header_size, '\0');
  PS_RETURN_IF_ERROR(read(json.data(), header_size, "the header"));
  v1::TrainedModel model;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // Fields of later versions.
  if (auto s =
          google::protobuf::util::JsonStringToMessage(json, &model, options);
      !s.ok()) {
    return Corrupt(path, absl::StrCat("unreadable header: ", s.ToString()));
  }

  PS_ASSIGN_OR_RETURN(
      const std::vector<int64_t> bytes,
      TensorDataBytes(model, file_size - data_start, with_tables, path));
  int64_t offset = data_start;
  for (int i = 0; i < model.tensors_size(); ++i) {
    std::string* data = model.mutable_tensors(i)->mutable_data();
    data->resize(bytes[i]);
    PS_RETURN_IF_ERROR(read(data->data(), bytes[i], "the data"));
    offset += bytes[i];
  }
  if (layout != nullptr) {
    *layout = {.has_tables = with_tables,
               .tables_offset = offset,
               .file_size = file_size};
  }
  return model;
}

}  // namespace ps

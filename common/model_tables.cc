#include "common/model_tables.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model_file.h"
#include "common/model_layout.h"
#include "common/status_macros.h"

namespace ps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "model files are little-endian; this build reads them raw");

constexpr int kMaxDim = 1024;

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("model file ", path, " is damaged: ", what));
}

// Each table's dim from the header; INVALID_ARGUMENT (or, for a file
// read, the caller's DATA_LOSS) outside 1..kMaxDim.
absl::StatusOr<std::vector<int>> TableDims(const v1::ModelSpec& model) {
  std::vector<int> dims;
  for (int t = 0; t < model.sparse_tables_size(); ++t) {
    const int dim = model.sparse_tables(t).dim();
    if (dim < 1 || dim > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.sparse_tables[", t, "].dim: ", dim,
                       " is outside 1..", kMaxDim));
    }
    dims.push_back(dim);
  }
  return dims;
}

// Rows of dim `dim` that fit one chunk.
uint32_t RowsPerChunk(int dim) {
  const int64_t per_row = 8 + 4 * int64_t{dim};
  return static_cast<uint32_t>(
      std::min<int64_t>(kMaxRowsPerChunk, kMaxChunkBytes / per_row));
}

}  // namespace

// ModelFileWriter

ModelFileWriter::ModelFileWriter(std::string path, std::vector<int> dims,
                                 FILE* file)
    : path_(std::move(path)),
      tmp_(absl::StrCat(path_, ".tmp")),
      dims_(std::move(dims)),
      file_(file) {}

ModelFileWriter::~ModelFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) std::remove(tmp_.c_str());
}

absl::StatusOr<std::unique_ptr<ModelFileWriter>> ModelFileWriter::Create(
    const v1::TrainedModel& model, const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::vector<int> dims, TableDims(model.model()));
  PS_ASSIGN_OR_RETURN(const std::string head,
                      EncodeModelFileHead(model, /*with_tables=*/true));
  const std::string tmp = absl::StrCat(path, ".tmp");
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", tmp));
  }
  std::unique_ptr<ModelFileWriter> writer(
      new ModelFileWriter(path, std::move(dims), f));
  PS_RETURN_IF_ERROR(writer->Write(head.data(), head.size()));
  for (const v1::Tensor& t : model.tensors()) {
    PS_RETURN_IF_ERROR(writer->Write(t.data().data(), t.data().size()));
  }
  return writer;
}

absl::Status ModelFileWriter::Write(const void* data, size_t n) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model file ", tmp_, " is closed"));
  }
  if (n > 0 && std::fwrite(data, 1, n, file_) != n) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", tmp_));
  }
  return absl::OkStatus();
}

absl::Status ModelFileWriter::AppendRows(uint32_t table,
                                         std::span<const uint64_t> ids,
                                         std::span<const float> values) {
  if (table >= dims_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", table, ": the model has ", dims_.size(), " tables"));
  }
  const size_t dim = static_cast<size_t>(dims_[table]);
  if (values.size() != ids.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, ": ", values.size(), " values for ",
                     ids.size(), " rows of dim ", dim));
  }
  const size_t per_chunk = RowsPerChunk(dims_[table]);
  for (size_t first = 0; first < ids.size(); first += per_chunk) {
    const uint32_t n =
        static_cast<uint32_t>(std::min(per_chunk, ids.size() - first));
    const uint32_t head[2] = {table, n};
    PS_RETURN_IF_ERROR(Write(head, sizeof(head)));
    PS_RETURN_IF_ERROR(Write(ids.data() + first, n * sizeof(uint64_t)));
    PS_RETURN_IF_ERROR(
        Write(values.data() + first * dim, n * dim * sizeof(float)));
    rows_ += n;
  }
  return absl::OkStatus();
}

absl::Status ModelFileWriter::Finish() {
  const uint32_t end[2] = {kTableSectionEnd, 0};
  const uint64_t rows = static_cast<uint64_t>(rows_);
  PS_RETURN_IF_ERROR(Write(end, sizeof(end)));
  PS_RETURN_IF_ERROR(Write(&rows, sizeof(rows)));
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", tmp_));
  }
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", tmp_));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot rename ", tmp_, " to ", path_));
  }
  finished_ = true;
  return absl::OkStatus();
}

// ModelTableReader

ModelTableReader::ModelTableReader(std::string path, v1::TrainedModel model,
                                   FILE* file, int64_t offset,
                                   int64_t file_size)
    : path_(std::move(path)),
      model_(std::move(model)),
      file_(file),
      offset_(offset),
      file_size_(file_size) {}

ModelTableReader::~ModelTableReader() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<ModelTableReader>> ModelTableReader::Open(
    const std::string& path) {
  ModelFileLayout layout;
  PS_ASSIGN_OR_RETURN(v1::TrainedModel model, ReadModelFile(path, &layout));
  if (!layout.has_tables) {
    return Corrupt(path, absl::StrCat("it holds no sparse tables (",
                                      kModelFileMagic, ")"));
  }
  if (auto dims = TableDims(model.model()); !dims.ok()) {
    return Corrupt(path, std::string(dims.status().message()));
  }
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot open model file ", path));
  }
  if (std::fseek(f, layout.tables_offset, SEEK_SET) != 0) {
    std::fclose(f);
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot read model file ", path));
  }
  return std::unique_ptr<ModelTableReader>(new ModelTableReader(
      path, std::move(model), f, layout.tables_offset, layout.file_size));
}

absl::StatusOr<bool> ModelTableReader::Next(TableChunk* chunk) {
  if (ended_) return false;
  auto read = [&](void* out, int64_t n, const char* what) -> absl::Status {
    if (n > file_size_ - offset_) {
      return Corrupt(path_,
                     absl::StrCat("truncated in ", what, " at byte ", offset_));
    }
    if (n > 0 && std::fread(out, 1, n, file_) != static_cast<size_t>(n)) {
      if (std::ferror(file_)) {
        return absl::ErrnoToStatus(
            errno, absl::StrCat("cannot read model file ", path_));
      }
      return Corrupt(path_, absl::StrCat("truncated in ", what));
    }
    offset_ += n;
    return absl::OkStatus();
  };
  uint32_t head[2];
  PS_RETURN_IF_ERROR(read(head, sizeof(head), "a chunk's head"));
  if (head[0] == kTableSectionEnd) {
    uint64_t rows = 0;
    PS_RETURN_IF_ERROR(read(&rows, sizeof(rows), "the end marker"));
    if (head[1] != 0 || rows != static_cast<uint64_t>(rows_)) {
      return Corrupt(path_, absl::StrCat("the end marker counts ", rows,
                                         " rows, the chunks hold ", rows_));
    }
    if (offset_ != file_size_) {
      return Corrupt(path_, absl::StrCat(file_size_ - offset_,
                                         " bytes after the end marker"));
    }
    ended_ = true;
    return false;
  }
  const uint32_t table = head[0], n = head[1];
  if (table >= static_cast<uint32_t>(model_.model().sparse_tables_size())) {
    return Corrupt(path_, absl::StrCat("a chunk at byte ", offset_ - 8,
                                       " names table ", table, " of ",
                                       model_.model().sparse_tables_size()));
  }
  const int dim = model_.model().sparse_tables(table).dim();
  if (n == 0 || n > RowsPerChunk(dim)) {
    return Corrupt(
        path_,
        absl::StrCat("a chunk at byte ", offset_ - 8, " holds ", n,
                     " rows (1 to ", RowsPerChunk(dim), " for dim ", dim, ")"));
  }
  chunk->table = table;
  chunk->ids.resize(n);
  chunk->values.resize(size_t{n} * dim);
  PS_RETURN_IF_ERROR(read(chunk->ids.data(), int64_t{n} * 8, "a chunk's ids"));
  PS_RETURN_IF_ERROR(
      read(chunk->values.data(), int64_t{n} * dim * 4, "a chunk's values"));
  rows_ += n;
  return true;
}

absl::StatusOr<std::vector<ModelTableRows>> ReadAllModelTables(
    const std::string& path) {
  ModelFileLayout layout;
  PS_ASSIGN_OR_RETURN(v1::TrainedModel model, ReadModelFile(path, &layout));
  std::vector<ModelTableRows> tables(model.model().sparse_tables_size());
  if (!layout.has_tables) return tables;
  PS_ASSIGN_OR_RETURN(auto reader, ModelTableReader::Open(path));
  TableChunk chunk;
  while (true) {
    PS_ASSIGN_OR_RETURN(const bool more, reader->Next(&chunk));
    if (!more) break;
    ModelTableRows& t = tables[chunk.table];
    t.ids.insert(t.ids.end(), chunk.ids.begin(), chunk.ids.end());
    t.values.insert(t.values.end(), chunk.values.begin(), chunk.values.end());
  }
  return tables;
}

absl::Status CheckModelFitsJob(const v1::TrainedModel& file,
                               const v1::JobSpec& spec) {
  const auto invalid = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("init_from: ", what));
  };
  auto want = ModelTensors(spec.model());
  if (!want.ok()) return invalid(std::string(want.status().message()));
  if (file.tensors_size() != static_cast<int>(want->size())) {
    return invalid(absl::StrCat("the model file has ", file.tensors_size(),
                                " dense tensors, the job's model ",
                                want->size()));
  }
  for (int i = 0; i < file.tensors_size(); ++i) {
    const v1::Tensor& t = file.tensors(i);
    const TensorSpec& w = (*want)[i];
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    if (t.name() != w.name || shape != w.shape) {
      return invalid(absl::StrCat(
          "tensor ", i, " is ", t.name(), " [", absl::StrJoin(shape, ", "),
          "] in the model file, ", w.name, " [", absl::StrJoin(w.shape, ", "),
          "] in the job's model"));
    }
  }
  const auto& have = file.model().sparse_tables();
  const auto& need = spec.model().sparse_tables();
  for (int t = 0; t < std::max(have.size(), need.size()); ++t) {
    if (t >= need.size()) {
      return invalid(absl::StrCat(
          "the model file's table ", t, " (", have[t].name(),
          ") is not a table of the job's model (", need.size(), " tables)"));
    }
    if (t >= have.size()) {
      return invalid(absl::StrCat(
          "the job's model.sparse_tables[", t, "] (", need[t].name(),
          ") is not in the model file (", have.size(), " tables)"));
    }
    if (have[t].name() != need[t].name() || have[t].dim() != need[t].dim()) {
      return invalid(absl::StrCat(
          "table ", t, " is ", have[t].name(), " of dim ", have[t].dim(),
          " in the model file, but the job's model.sparse_tables[", t, "] is ",
          need[t].name(), " of dim ", need[t].dim()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps

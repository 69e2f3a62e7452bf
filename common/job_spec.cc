#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/elastic_spec.h"
#include "common/model_layout.h"
#include "common/optimizer_spec.h"
#include "common/sparse_spec.h"
#include "common/status_macros.h"
#include "common/training_spec.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace {

absl::Status Invalid(const std::string& field, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// True if `text` holds a byte below 0x20 (NUL, newline, escape...) or DEL.
bool HasControlChar(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

constexpr char kUnsafeNameReason[] =
    "may not hold newlines or other control characters (C0, C1), line or "
    "paragraph separators (U+2028, U+2029), or bidirectional controls "
    "(U+202A to U+202E, U+2066 to U+2069)";

// INVALID_ARGUMENT naming the first float or double field of `message` (at
// `path`), at any depth, that holds NaN or an infinity. Every float of a spec
// is a rate, a coefficient or a scale for which neither means anything, and a
// range check such as "v >= 0" lets +Infinity through.
absl::Status CheckFiniteFloats(const google::protobuf::Message& message,
                               const std::string& path) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name =
        path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    const int n =
        field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string at =
          field->is_repeated() ? absl::StrCat(name, "[", i, "]") : name;
      double value = 0;
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_FLOAT:
          value = field->is_repeated()
                      ? reflection->GetRepeatedFloat(message, field, i)
                      : reflection->GetFloat(message, field);
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          value = field->is_repeated()
                      ? reflection->GetRepeatedDouble(message, field, i)
                      : reflection->GetDouble(message, field);
          break;
        case FieldDescriptor::CPPTYPE_MESSAGE: {
          const google::protobuf::Message& sub =
              field->is_repeated()
                  ? reflection->GetRepeatedMessage(message, field, i)
                  : reflection->GetMessage(message, field);
          if (auto s = CheckFiniteFloats(sub, at); !s.ok()) return s;
          continue;
        }
        default:
          continue;
      }
      if (!std::isfinite(value)) {
        return Invalid(at, "must be a finite number (not NaN or Infinity)");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDataset(const v1::DatasetSpec& dataset) {
  const bool idx = dataset.format() == v1::DatasetSpec::IDX;
  if (!idx && dataset.format() != v1::DatasetSpec::CSV &&
      dataset.format() != v1::DatasetSpec::LIBSVM &&
      dataset.format() != v1::DatasetSpec::CRITEO) {
    return Invalid("dataset.format", "must be IDX, CSV, LIBSVM or CRITEO");
  }
  // IDX keeps images and labels apart; the text formats hold both in one
  // file each.
  using Paths = std::vector<std::pair<const char*, const std::string*>>;
  const Paths idx_paths = {
      {"dataset.train_images", &dataset.train_images()},
      {"dataset.train_labels", &dataset.train_labels()},
      {"dataset.test_images", &dataset.test_images()},
      {"dataset.test_labels", &dataset.test_labels()},
  };
  const Paths text_paths = {
      {"dataset.train_file", &dataset.train_file()},
      {"dataset.test_file", &dataset.test_file()},
  };
  for (const auto& [field, path] : idx ? idx_paths : text_paths) {
    if (path->empty()) return Invalid(field, "required");
  }
  for (const auto& [field, path] : idx ? text_paths : idx_paths) {
    if (!path->empty()) {
      return Invalid(field, idx ? "only CSV, LIBSVM and CRITEO data use it"
                                : "only IDX data uses it (use train_file and "
                                  "test_file)");
    }
  }
  if (dataset.csv_header() && dataset.format() != v1::DatasetSpec::CSV) {
    return Invalid("dataset.csv_header", "only CSV data has a header");
  }
  for (const Paths* paths : {&idx_paths, &text_paths}) {
    for (const auto& [field, path] : *paths) {
      if (path->size() > kMaxPathBytes) {
        return Invalid(field,
                       absl::StrCat("longer than ", kMaxPathBytes, " bytes"));
      }
      // A NUL would cut the path short where the worker opens it (it would
      // train on another file); newlines and other control bytes would be
      // written raw into logs.
      if (HasControlChar(*path)) {
        return Invalid(field, "holds a NUL byte or another control character");
      }
    }
  }
  if (dataset.max_train_samples() < 0) {
    return Invalid("dataset.max_train_samples", "must be >= 0");
  }
  if (dataset.max_test_samples() < 0) {
    return Invalid("dataset.max_test_samples", "must be >= 0");
  }
  return absl::OkStatus();
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

}  // namespace

bool HasUnsafeDisplayChar(absl::string_view text) {
  if (HasControlChar(text)) return true;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    const auto b1 = static_cast<unsigned char>(text[i + 1]);
    // U+0080..U+009F: C2 80..C2 9F.
    if (b0 == 0xC2 && b1 >= 0x80 && b1 <= 0x9F) return true;
    if (b0 != 0xE2 || i + 2 >= text.size()) continue;
    const auto b2 = static_cast<unsigned char>(text[i + 2]);
    // U+2028..U+202E: E2 80 A8..AE; U+2066..U+2069: E2 81 A6..A9.
    if (b1 == 0x80 && b2 >= 0xA8 && b2 <= 0xAE) return true;
    if (b1 == 0x81 && b2 >= 0xA6 && b2 <= 0xA9) return true;
  }
  return false;
}

absl::Status ValidateId(absl::string_view field, absl::string_view id) {
  if (id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  }
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": longer than ", kMaxIdBytes, " bytes"));
  }
  for (char c : id) {
    if (!IsIdChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": may hold only letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::Status MessageFromJson(const std::string& json, absl::string_view what,
                             google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status =
      google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not valid JSON for ", message->GetTypeName(),
                     ": ", std::string(status.message())));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> JobSpecFromJson(const std::string& json) {
  v1::JobSpec spec;
  PS_RETURN_IF_ERROR(MessageFromJson(json, "job spec", &spec));
  return spec;
}

absl::StatusOr<v1::JobSpec> JobSpecFromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromJson(text.str());
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

std::string JobSpecToJson(const v1::JobSpec& spec) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &json, options);
  return json;
}

int32_t DeriveBlockElems(const std::vector<TensorSpec>& tensors,
                         int num_servers) {
  const int64_t servers =
      std::clamp<int64_t>(num_servers, 1, int64_t{kMaxNodesPerJob});
  if (servers == 1) return kDefaultBlockElems;
  // Past this many values the result is kDefaultBlockElems anyway; stopping
  // there keeps the sum from overflowing.
  const int64_t saturated = servers * kBlocksPerServer * kDefaultBlockElems;
  int64_t elems = 0;
  for (const TensorSpec& t : tensors) {
    elems = std::min(saturated, elems + std::min(saturated, t.num_elems()));
  }
  const int64_t per_block =
      (elems + servers * kBlocksPerServer - 1) / (servers * kBlocksPerServer);
  const int64_t aligned =
      (per_block + kBlockAlignElems - 1) / kBlockAlignElems * kBlockAlignElems;
  return static_cast<int32_t>(
      std::clamp<int64_t>(aligned, kBlockAlignElems, kDefaultBlockElems));
}

void ApplyJobSpecDefaults(v1::JobSpec* spec) {
  ApplyElasticDefaults(spec);
  if (spec->block_elems() == 0) {
    // The block size follows the model and the server count
    // (docs/architecture.md, "Model, blocks and the shard map"); a
    // missing or bad model keeps the fixed default, and validation says why.
    int32_t block_elems = kDefaultBlockElems;
    if (spec->has_model()) {
      auto tensors = ModelTensors(spec->model());
      if (tensors.ok()) {
        block_elems = DeriveBlockElems(*tensors, spec->num_servers());
      }
    }
    spec->set_block_elems(block_elems);
  }
  if (spec->durability() == v1::DURABILITY_UNSPECIFIED) {
    spec->set_durability(v1::WAL);
  }
  auto* consistency = spec->mutable_consistency();
  if (consistency->model() == v1::ConsistencySpec::MODEL_UNSPECIFIED) {
    consistency->set_model(v1::ConsistencySpec::BSP);
  }
  // A missing model stays missing, so that validation says so.
  if (spec->has_model() &&
      (spec->model().kind() == v1::ModelSpec::MLP ||
       spec->model().kind() == v1::ModelSpec::CNN) &&
      spec->model().activation() == v1::ACTIVATION_UNSPECIFIED) {
    spec->mutable_model()->set_activation(v1::RELU);
  }
  if (spec->has_model() && spec->model().kind() == v1::ModelSpec::EXTERNAL) {
    for (v1::TensorDecl& t : *spec->mutable_model()->mutable_tensors()) {
      if (t.init() == v1::TENSOR_INIT_UNSPECIFIED) t.set_init(v1::FROM_WORKER);
    }
  }
  if (spec->non_finite_gradients() == v1::NON_FINITE_POLICY_UNSPECIFIED) {
    spec->set_non_finite_gradients(v1::NON_FINITE_REFUSE);
  }
  if (spec->mixed_precision().compute() == v1::FP16) {
    auto* mixed = spec->mutable_mixed_precision();
    if (mixed->initial_loss_scale() == 0) mixed->set_initial_loss_scale(65536);
    if (mixed->loss_scale_growth_interval() == 0) {
      mixed->set_loss_scale_growth_interval(2000);
    }
  }
  // A missing optimizer stays missing, so that validation says so.
  if (spec->has_optimizer()) ApplyOptimizerDefaults(spec->mutable_optimizer());
  ApplySparseDefaults(spec);
}

namespace {

// Largest block_elems ValidateJobSpec allows.
constexpr int64_t kMaxBlockElems = 4 * int64_t{kDefaultBlockElems};

// INVALID_ARGUMENT naming the model's widest hidden layer (or the model)
// when it holds more values than kMaxBlocksPerJob blocks of the largest size
// can: then no block_elems would do.
absl::Status CheckModelFitsBlocks(const v1::ModelSpec& model,
                                  const std::vector<TensorSpec>& tensors) {
  constexpr int64_t kMaxElems = kMaxBlocksPerJob * kMaxBlockElems;
  int64_t elems = 0;
  for (const TensorSpec& t : tensors) {
    // A tensor holds at most 2^62 values; stop before the sum could overflow.
    elems += t.num_elems();
    if (elems > kMaxElems) break;
  }
  if (elems <= kMaxElems) return absl::OkStatus();
  std::string field = "model";
  int widest = -1;
  if (model.kind() == v1::ModelSpec::EXTERNAL) {
    // The largest declared tensor.
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (widest < 0 || tensors[i].num_elems() > tensors[widest].num_elems()) {
        widest = static_cast<int>(i);
      }
    }
    if (widest >= 0) field = absl::StrCat("model.tensors[", widest, "]");
  } else {
    for (int i = 0; i < model.hidden_layers_size(); ++i) {
      if (widest < 0 || model.hidden_layers(i) > model.hidden_layers(widest)) {
        widest = i;
      }
    }
    if (widest >= 0) field = absl::StrCat("model.hidden_layers[", widest, "]");
  }
  return Invalid(
      field, absl::StrCat("the model would hold more than ", kMaxElems,
                          " parameters (", kMaxElems * int64_t{sizeof(float)},
                          " bytes), more than any job can; use smaller "
                          "layers"));
}

absl::Status ValidateMixedPrecision(const v1::MixedPrecisionSpec& mixed) {
  // Independent of `compute`: any format may carry gradients of any compute.
  switch (mixed.wire_gradients()) {
    case v1::FP32:
    case v1::FP16:
    case v1::BF16:
      break;
    default:
      return Invalid("mixed_precision.wire_gradients",
                     "must be FP32, FP16 or BF16");
  }
  switch (mixed.wire_parameters()) {
    case v1::FP32:
    case v1::FP16:
    case v1::BF16:
      break;
    default:
      return Invalid("mixed_precision.wire_parameters",
                     "must be FP32, FP16 or BF16");
  }
  switch (mixed.compute()) {
    case v1::FP32:
    case v1::BF16:
      if (mixed.initial_loss_scale() != 0 ||
          mixed.loss_scale_growth_interval() != 0) {
        return Invalid("mixed_precision.initial_loss_scale",
                       "only FP16 uses loss scaling");
      }
      return absl::OkStatus();
    case v1::FP16:
      break;
    default:
      return Invalid("mixed_precision.compute", "must be FP32, FP16 or BF16");
  }
  // Defaults applied: 0 is not a valid scale here.
  const float scale = mixed.initial_loss_scale();
  if (!(scale >= 1) || !std::isfinite(scale) || scale > 16777216.0f) {
    return Invalid("mixed_precision.initial_loss_scale",
                   "must be in [1, 2^24]");
  }
  if (mixed.loss_scale_growth_interval() < 1) {
    return Invalid("mixed_precision.loss_scale_growth_interval",
                   "must be >= 1");
  }
  return absl::OkStatus();
}

// The consistency model and its options.
absl::Status ValidateConsistency(const v1::ConsistencySpec& consistency) {
  switch (consistency.model()) {
    case v1::ConsistencySpec::BSP:
    case v1::ConsistencySpec::ASP:
      if (consistency.staleness() != 0) {
        return Invalid("consistency.staleness", "only SSP takes a bound");
      }
      if (consistency.worker_cache()) {
        return Invalid("consistency.worker_cache", "only SSP uses a cache");
      }
      break;
    case v1::ConsistencySpec::SSP:
      if (consistency.staleness() < 0) {
        return Invalid("consistency.staleness",
                       "must be >= 0 for SSP (use model ASP for no bound)");
      }
      break;
    default:
      return Invalid("consistency.model", "must be BSP, SSP or ASP");
  }
  return absl::OkStatus();
}

// consistency.pipeline_parts (docs/consistency.md, "The pipelined step").
absl::Status ValidatePipelineParts(const v1::JobSpec& spec) {
  const int32_t parts = spec.consistency().pipeline_parts();
  if (parts < 0 || parts > kMaxPipelineParts) {
    return Invalid("consistency.pipeline_parts",
                   absl::StrCat("must be in [0, ", kMaxPipelineParts, "]"));
  }
  if (parts < 2) return absl::OkStatus();
  if (spec.consistency().model() != v1::ConsistencySpec::BSP) {
    return Invalid("consistency.pipeline_parts", "only BSP pipelines a step");
  }
  if (spec.model().sparse_tables_size() > 0) {
    return Invalid("consistency.pipeline_parts",
                   "a job with sparse tables pushes whole steps");
  }
  if (IsElastic(spec)) {
    return Invalid("consistency.pipeline_parts",
                   "an elastic job pushes whole steps");
  }
  return absl::OkStatus();
}

// The numbers of workers and servers, the block size and the number of
// blocks of the model (of `tensors`).
absl::Status ValidateLayout(const v1::JobSpec& spec,
                            const std::vector<TensorSpec>& tensors) {
  if (spec.num_workers() < 1) return Invalid("num_workers", "must be >= 1");
  if (spec.num_workers() > kMaxNodesPerJob) {
    return Invalid("num_workers", absl::StrCat("must be <= ", kMaxNodesPerJob));
  }
  if (spec.num_servers() < 1) return Invalid("num_servers", "must be >= 1");
  if (spec.num_servers() > kMaxNodesPerJob) {
    return Invalid("num_servers", absl::StrCat("must be <= ", kMaxNodesPerJob));
  }
  if (spec.block_elems() < 1) return Invalid("block_elems", "must be >= 1");
  // A block travels in one message; keep it well under the 64 MiB message
  // limit.
  if (spec.block_elems() > kMaxBlockElems) {
    return Invalid("block_elems", "must be <= 1048576 (4 MiB)");
  }
  // The shard map lists every block and travels in every heartbeat reply. A
  // model too large for the most blocks of the largest size is the model's
  // fault, not the block size's: name its largest layer.
  if (auto s = CheckModelFitsBlocks(spec.model(), tensors); !s.ok()) return s;
  int64_t blocks = 0;
  for (const TensorSpec& t : tensors) {
    blocks += (t.num_elems() + spec.block_elems() - 1) / spec.block_elems();
    if (blocks > kMaxBlocksPerJob) {
      return Invalid(
          "block_elems",
          absl::StrCat("the model would have more than ", kMaxBlocksPerJob,
                       " blocks; use larger blocks or a smaller "
                       "model"));
    }
  }
  return absl::OkStatus();
}

// The durability and the handling of non-finite gradients.
absl::Status ValidateModes(const v1::JobSpec& spec) {
  switch (spec.durability()) {
    case v1::WAL:
    case v1::SYNC:
    case v1::MEMORY:
      break;
    default:
      return Invalid("durability", "must be WAL, SYNC or MEMORY");
  }
  switch (spec.non_finite_gradients()) {
    case v1::NON_FINITE_REFUSE:
    case v1::NON_FINITE_DROP:
      break;
    default:
      return Invalid("non_finite_gradients",
                     "must be NON_FINITE_REFUSE or NON_FINITE_DROP");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (spec.name().size() > 128) return Invalid("name", "longer than 128 bytes");
  // The name is logged and shown by psctl: a newline would forge log lines.
  if (HasUnsafeDisplayChar(spec.name())) {
    return Invalid("name", kUnsafeNameReason);
  }
  if (auto s = CheckFiniteFloats(spec, ""); !s.ok()) return s;
  if (!spec.has_model()) return Invalid("model", "required");
  // Before the model's dense shapes: a CTR model's depend on its tables.
  if (auto s = ValidateSparseSpec(spec); !s.ok()) return s;
  auto tensors = ModelTensors(spec.model());
  if (!tensors.ok()) return tensors.status();
  const bool external = spec.model().kind() == v1::ModelSpec::EXTERNAL;
  // An EXTERNAL model's workers bring their own data; a data set named
  // anyway must be complete.
  if (!external || spec.has_dataset()) {
    if (auto s = ValidateDataset(spec.dataset()); !s.ok()) return s;
  }
  if (external && spec.mixed_precision().compute() != v1::FP32) {
    return Invalid("mixed_precision.compute",
                   "an EXTERNAL model computes in the precision its workers "
                   "choose (torch.autocast); only wire_gradients and "
                   "wire_parameters apply");
  }
  if (spec.epochs() < 1) return Invalid("epochs", "must be >= 1");
  if (spec.batch_size() < 1) return Invalid("batch_size", "must be >= 1");
  if (spec.batch_size() > kMaxBatchSize) {
    return Invalid("batch_size", absl::StrCat("must be <= ", kMaxBatchSize));
  }
  if (auto s = ValidateOptimizerSpec(spec.optimizer()); !s.ok()) return s;
  if (auto s = ValidateTrainingOptions(spec); !s.ok()) return s;
  if (auto s = ValidateConsistency(spec.consistency()); !s.ok()) return s;
  if (auto s = ValidateLayout(spec, *tensors); !s.ok()) return s;
  if (auto s = ValidateElastic(spec); !s.ok()) return s;
  if (auto s = ValidatePipelineParts(spec); !s.ok()) return s;
  if (auto s = ValidateModes(spec); !s.ok()) return s;
  // The file itself is checked against the spec by psctl at submit and by
  // each server when it opens the job (CheckModelFitsJob).
  if (const std::string& from = spec.init_from(); !from.empty()) {
    if (from.front() != '/') return Invalid("init_from", "must be absolute");
    if (from.size() > kMaxPathBytes) {
      return Invalid("init_from",
                     absl::StrCat("longer than ", kMaxPathBytes, " bytes"));
    }
    if (HasControlChar(from)) {
      return Invalid("init_from",
                     "holds a NUL byte or another control character");
    }
  }
  return ValidateMixedPrecision(spec.mixed_precision());
}

int64_t ModelBytes(const std::vector<TensorSpec>& tensors) {
  // Saturates instead of overflowing: a tensor may hold up to 2^62 values.
  constexpr int64_t kMaxElems =
      std::numeric_limits<int64_t>::max() / int64_t{sizeof(float)};
  int64_t elems = 0;
  for (const TensorSpec& t : tensors) {
    elems = std::min(kMaxElems, elems + std::min(kMaxElems, t.num_elems()));
  }
  return elems * static_cast<int64_t>(sizeof(float));
}

int64_t EffectiveStaleness(const v1::ConsistencySpec& consistency) {
  switch (consistency.model()) {
    case v1::ConsistencySpec::SSP:
      return consistency.staleness();
    case v1::ConsistencySpec::ASP:
      return kAsyncStaleness;
    default:
      return 0;
  }
}

}  // namespace ps

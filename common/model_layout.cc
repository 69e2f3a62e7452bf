#include "common/model_layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/ctr_layout.h"
#include "common/status_macros.h"

namespace ps {

bool IsUnseeded(const std::vector<float>& values) {
  if (values.empty()) return false;
  uint32_t bits;
  std::memcpy(&bits, values.data(), sizeof(bits));
  return bits == kUnseededBits;
}

namespace {

// Largest dimension of an EXTERNAL model's tensor: 2^40 values. The product
// of dimensions is checked to stay below this too, so it never overflows;
// CheckModelFitsBlocks (common/job_spec.cc) bounds the model far below.
constexpr int64_t kMaxExternalElems = int64_t{1} << 40;

absl::Status Invalid(const std::string& field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// The built-in models' fields mean nothing to an EXTERNAL model: refused
// rather than letting a spec look as if it configured something. Also the
// number of tensors.
absl::Status CheckExternalModelFields(const v1::ModelSpec& model) {
  if (model.hidden_layers_size() > 0) {
    return Invalid("model.hidden_layers", "an EXTERNAL model does not use it");
  }
  if (model.activation() != v1::ACTIVATION_UNSPECIFIED) {
    return Invalid("model.activation", "an EXTERNAL model does not use it");
  }
  if (model.input_dim() != 0) {
    return Invalid("model.input_dim", "an EXTERNAL model does not use it");
  }
  if (model.num_classes() != 0) {
    return Invalid("model.num_classes", "an EXTERNAL model does not use it");
  }
  if (model.conv_layers_size() > 0) {
    return Invalid("model.conv_layers", "an EXTERNAL model does not use it");
  }
  if (model.has_image()) {
    return Invalid("model.image", "an EXTERNAL model does not use it");
  }
  if (model.tensors_size() == 0) {
    return Invalid("model.tensors", "an EXTERNAL model needs at least one");
  }
  if (model.tensors_size() > kMaxModelTensors) {
    return Invalid("model.tensors",
                   absl::StrCat("more than ", kMaxModelTensors, " tensors"));
  }
  return absl::OkStatus();
}

// A declared tensor's name (`field` names the declaration), unique among
// `names`, which it joins.
absl::Status CheckTensorName(const v1::TensorDecl& decl,
                             const std::string& field,
                             absl::flat_hash_set<std::string>* names) {
  if (decl.name().empty()) return Invalid(field + ".name", "required");
  if (decl.name().size() > kMaxTensorNameBytes) {
    return Invalid(field + ".name",
                   absl::StrCat("longer than ", kMaxTensorNameBytes, " bytes"));
  }
  for (char c : decl.name()) {
    if (c <= ' ' || c > '~') {
      return Invalid(field + ".name",
                     "may hold only printable ASCII without spaces");
    }
  }
  if (!names->insert(decl.name()).second) {
    return Invalid(field + ".name",
                   absl::StrCat("\"", decl.name(), "\" appears twice"));
  }
  return absl::OkStatus();
}

// Sets t's shape from the declaration; returns its number of values.
absl::StatusOr<int64_t> SetTensorShape(const v1::TensorDecl& decl,
                                       const std::string& field,
                                       TensorSpec* t) {
  if (decl.shape_size() > kMaxTensorRank) {
    return Invalid(field + ".shape",
                   absl::StrCat("more than ", kMaxTensorRank, " dimensions"));
  }
  int64_t elems = 1;
  for (int d = 0; d < decl.shape_size(); ++d) {
    const int64_t dim = decl.shape(d);
    if (dim < 1 || dim > kMaxExternalElems) {
      return Invalid(absl::StrCat(field, ".shape[", d, "]"),
                     absl::StrCat("must be in [1, ", kMaxExternalElems, "]"));
    }
    // Both factors are at most 2^40: compare before multiplying.
    if (elems > kMaxExternalElems / dim) {
      return Invalid(field + ".shape",
                     absl::StrCat("more than ", kMaxExternalElems, " values"));
    }
    elems *= dim;
    t->shape.push_back(dim);
  }
  return elems;
}

// Whether a declaration's initializer uses fan_in and fan_out.
bool UsesFans(const v1::TensorDecl& decl) {
  return decl.init() == v1::HE_UNIFORM || decl.init() == v1::XAVIER_UNIFORM;
}

// Sets t's initializer (and its value) from the declaration.
absl::Status SetTensorInit(const v1::TensorDecl& decl, const std::string& field,
                           TensorSpec* t) {
  if (decl.fan_in() < 0) return Invalid(field + ".fan_in", "must be >= 0");
  if (decl.fan_out() < 0) return Invalid(field + ".fan_out", "must be >= 0");
  if (!UsesFans(decl) && (decl.fan_in() != 0 || decl.fan_out() != 0)) {
    return Invalid(decl.fan_in() != 0 ? field + ".fan_in" : field + ".fan_out",
                   "only HE_UNIFORM and XAVIER_UNIFORM use it");
  }
  if (decl.init() != v1::CONSTANT && decl.value() != 0) {
    return Invalid(field + ".value", "only CONSTANT uses it");
  }
  switch (decl.init()) {
    case v1::TENSOR_INIT_UNSPECIFIED:
    case v1::FROM_WORKER:
      t->init = InitKind::kFromWorker;
      return absl::OkStatus();
    case v1::ZEROS:
      t->init = InitKind::kZeros;
      return absl::OkStatus();
    case v1::CONSTANT:
      if (!std::isfinite(decl.value())) {
        return Invalid(field + ".value", "must be finite");
      }
      t->init = InitKind::kConstant;
      t->value = decl.value();
      return absl::OkStatus();
    case v1::HE_UNIFORM:
      t->init = InitKind::kHeUniform;
      return absl::OkStatus();
    case v1::XAVIER_UNIFORM:
      t->init = InitKind::kXavierUniform;
      return absl::OkStatus();
    default:
      return Invalid(field + ".init",
                     "must be FROM_WORKER, ZEROS, CONSTANT, HE_UNIFORM or "
                     "XAVIER_UNIFORM");
  }
}

// Sets t's fans (for HE_UNIFORM and XAVIER_UNIFORM): the declared ones, or
// those of its shape (of `elems` values).
absl::Status SetTensorFans(const v1::TensorDecl& decl, const std::string& field,
                           int64_t elems, TensorSpec* t) {
  // PyTorch's _calculate_fan_in_and_fan_out, extended to fewer than two
  // dimensions.
  int64_t fan_in = 1, fan_out = 1;
  if (t->shape.size() >= 2) {
    const int64_t receptive = elems / (t->shape[0] * t->shape[1]);
    fan_in = t->shape[1] * receptive;
    fan_out = t->shape[0] * receptive;
  } else if (t->shape.size() == 1) {
    fan_in = fan_out = t->shape[0];
  }
  t->fan_in = decl.fan_in() > 0 ? decl.fan_in() : fan_in;
  t->fan_out = decl.fan_out() > 0 ? decl.fan_out() : fan_out;
  // fan_in + fan_out must not overflow (Xavier adds them).
  if (t->fan_in > kMaxExternalElems || t->fan_out > kMaxExternalElems) {
    return Invalid(
        field + (t->fan_in > kMaxExternalElems ? ".fan_in" : ".fan_out"),
        absl::StrCat("must be <= ", kMaxExternalElems));
  }
  return absl::OkStatus();
}

// The tensors an EXTERNAL model declares (ModelTensors).
absl::StatusOr<std::vector<TensorSpec>> ExternalModelTensors(
    const v1::ModelSpec& model) {
  PS_RETURN_IF_ERROR(CheckExternalModelFields(model));
  std::vector<TensorSpec> tensors;
  tensors.reserve(model.tensors_size());
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < model.tensors_size(); ++i) {
    const v1::TensorDecl& decl = model.tensors(i);
    const std::string field = absl::StrCat("model.tensors[", i, "]");
    PS_RETURN_IF_ERROR(CheckTensorName(decl, field, &names));
    TensorSpec t;
    t.name = decl.name();
    PS_ASSIGN_OR_RETURN(const int64_t elems, SetTensorShape(decl, field, &t));
    PS_RETURN_IF_ERROR(SetTensorInit(decl, field, &t));
    t.buffer = decl.buffer();
    if (UsesFans(decl)) {
      PS_RETURN_IF_ERROR(SetTensorFans(decl, field, elems, &t));
    }
    tensors.push_back(std::move(t));
  }
  if (std::all_of(tensors.begin(), tensors.end(),
                  [](const TensorSpec& t) { return t.buffer; })) {
    return Invalid("model.tensors",
                   "an EXTERNAL model needs at least one tensor that is not "
                   "a buffer");
  }
  return tensors;
}

}  // namespace

int64_t TensorSpec::num_elems() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::vector<ConvGeometry>> CnnConvLayers(
    const v1::ModelSpec& model) {
  std::vector<ConvGeometry> layers;
  if (model.kind() != v1::ModelSpec::CNN) {
    if (model.conv_layers_size() > 0) {
      return absl::InvalidArgumentError(
          "model.conv_layers: only a CNN has conv layers");
    }
    return layers;
  }
  const v1::ImageShape& image = model.image();
  if (image.height() < 1 || image.width() < 1 || image.channels() < 1) {
    return absl::InvalidArgumentError(
        "model.image: a CNN needs height, width and channels >= 1");
  }
  if (int64_t{image.height()} * image.width() * image.channels() !=
      model.input_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.image: height * width * channels = ",
                     int64_t{image.height()} * image.width() * image.channels(),
                     " differs from model.input_dim ", model.input_dim()));
  }
  if (model.conv_layers_size() == 0) {
    return absl::InvalidArgumentError(
        "model.conv_layers: a CNN needs at least one");
  }
  int height = image.height();
  int width = image.width();
  int channels = image.channels();
  for (int i = 0; i < model.conv_layers_size(); ++i) {
    const v1::ConvLayer& conv = model.conv_layers(i);
    const std::string field = absl::StrCat("model.conv_layers[", i, "]");
    if (conv.filters() < 1 || conv.filters() > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".filters: must be in [1, 4096]"));
    }
    if (conv.kernel_size() < 1 || conv.kernel_size() % 2 == 0 ||
        conv.kernel_size() > 15) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".kernel_size: must be odd, in [1, 15]"));
    }
    if (height < 2 || width < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": its input is ", height, "x", width,
          ", too small for 2x2 pooling (too many conv layers for the image)"));
    }
    layers.push_back(
        {height, width, channels, conv.filters(), conv.kernel_size()});
    height /= 2;
    width /= 2;
    channels = conv.filters();
  }
  return layers;
}

namespace {

// The widths of a built-in model's dense layers, input and output included
// (the input is the last convolution's output, if any).
absl::StatusOr<std::vector<int64_t>> DenseWidths(
    const v1::ModelSpec& model, const std::vector<ConvGeometry>& convs) {
  std::vector<int64_t> widths = {model.input_dim()};
  if (!convs.empty()) widths = {convs.back().pooled_size()};
  switch (model.kind()) {
    case v1::ModelSpec::MLP:
    case v1::ModelSpec::CNN:
      for (int i = 0; i < model.hidden_layers_size(); ++i) {
        if (model.hidden_layers(i) < 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("model.hidden_layers[", i, "]: must be >= 1"));
        }
        widths.push_back(model.hidden_layers(i));
      }
      break;
    case v1::ModelSpec::SOFTMAX_REGRESSION:
      if (model.hidden_layers_size() > 0) {
        return absl::InvalidArgumentError(
            "model.hidden_layers: SOFTMAX_REGRESSION has no hidden layers");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          "model.kind: must be MLP, SOFTMAX_REGRESSION, CNN, CTR or EXTERNAL");
  }
  widths.push_back(model.num_classes());
  return widths;
}

// A layer's weight and bias tensors, named <layer>.weight and <layer>.bias.
void AddLayer(const std::string& layer, std::vector<int64_t> weight_shape,
              InitKind init, int64_t fan_in, int64_t fan_out, int64_t outputs,
              std::vector<TensorSpec>* tensors) {
  TensorSpec weight;
  weight.name = absl::StrCat(layer, ".weight");
  weight.shape = std::move(weight_shape);
  weight.init = init;
  weight.fan_in = fan_in;
  weight.fan_out = fan_out;
  TensorSpec bias;
  bias.name = absl::StrCat(layer, ".bias");
  bias.shape = {outputs};
  bias.init = InitKind::kZeros;
  tensors->push_back(std::move(weight));
  tensors->push_back(std::move(bias));
}

}  // namespace

absl::StatusOr<std::vector<TensorSpec>> ModelTensors(
    const v1::ModelSpec& model) {
  if (model.kind() == v1::ModelSpec::EXTERNAL) {
    return ExternalModelTensors(model);
  }
  if (model.kind() == v1::ModelSpec::CTR) return CtrModelTensors(model);
  if (model.has_ctr()) {
    return absl::InvalidArgumentError("model.ctr: only a CTR model uses it");
  }
  if (model.tensors_size() > 0) {
    return absl::InvalidArgumentError(
        "model.tensors: only an EXTERNAL model lists its tensors");
  }
  if (model.input_dim() < 1) {
    return absl::InvalidArgumentError("model.input_dim: must be >= 1");
  }
  if (model.num_classes() < 2) {
    return absl::InvalidArgumentError("model.num_classes: must be >= 2");
  }
  PS_ASSIGN_OR_RETURN(auto convs, CnnConvLayers(model));
  PS_ASSIGN_OR_RETURN(const std::vector<int64_t> widths,
                      DenseWidths(model, convs));
  // Every other enum of a spec is refused when unknown; an unknown activation
  // would otherwise be accepted and fail on the workers at run time.
  switch (model.activation()) {
    case v1::ACTIVATION_UNSPECIFIED:
    case v1::RELU:
    case v1::TANH:
    case v1::SIGMOID:
      break;
    default:
      return absl::InvalidArgumentError(
          "model.activation: must be RELU, TANH or SIGMOID");
  }

  const bool relu = model.activation() == v1::RELU ||
                    model.activation() == v1::ACTIVATION_UNSPECIFIED;
  std::vector<TensorSpec> tensors;
  for (size_t i = 0; i < convs.size(); ++i) {
    const ConvGeometry& conv = convs[i];
    AddLayer(absl::StrCat("conv", i), {conv.patch_size(), conv.filters},
             relu ? InitKind::kHeUniform : InitKind::kXavierUniform,
             conv.patch_size(),
             int64_t{conv.kernel} * conv.kernel * conv.filters, conv.filters,
             &tensors);
  }
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const bool output_layer = i + 2 == widths.size();
    AddLayer(absl::StrCat("dense", i), {widths[i], widths[i + 1]},
             (relu && !output_layer) ? InitKind::kHeUniform
                                     : InitKind::kXavierUniform,
             widths[i], widths[i + 1], widths[i + 1], &tensors);
  }
  return tensors;
}

std::vector<BlockSpec> SplitIntoBlocks(const std::vector<TensorSpec>& tensors,
                                       int64_t block_elems) {
  std::vector<BlockSpec> blocks;
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    const int64_t n = tensors[t].num_elems();
    uint32_t b = 0;
    for (int64_t offset = 0; offset < n; offset += block_elems, ++b) {
      blocks.push_back({BlockKey(t, b), t, offset,
                        std::min<int64_t>(block_elems, n - offset)});
    }
  }
  return blocks;
}

namespace {

// 64-bit FNV-1a, continued over byte strings.
class Fnv1a64 {
 public:
  void Add(absl::string_view bytes) {
    for (unsigned char c : bytes) {
      hash_ ^= c;
      hash_ *= 0x100000001b3ull;  // FNV prime.
    }
  }
  std::string Digest() const { return absl::StrFormat("fnv1a64:%016x", hash_); }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;  // FNV-1a offset basis.
};

void AddTensors(const std::vector<TensorSpec>& tensors, Fnv1a64& hash) {
  // In name order: a spec may list an EXTERNAL model's tensors in any order
  // (workers match tensors by name).
  std::vector<const TensorSpec*> sorted;
  sorted.reserve(tensors.size());
  for (const TensorSpec& t : tensors) {
    if (!t.buffer) sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorSpec* a, const TensorSpec* b) {
              return a->name < b->name;
            });
  for (const TensorSpec* tensor : sorted) {
    const TensorSpec& t = *tensor;
    hash.Add(t.name);
    hash.Add("\t");
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) hash.Add(",");
      hash.Add(absl::StrCat(t.shape[d]));
    }
    hash.Add("\n");
  }
}

}  // namespace

std::string ModelDigest(const std::vector<TensorSpec>& tensors) {
  Fnv1a64 hash;
  AddTensors(tensors, hash);
  return hash.Digest();
}

std::string ModelDigest(const std::vector<TensorSpec>& tensors,
                        const v1::ModelSpec& model) {
  Fnv1a64 hash;
  AddTensors(tensors, hash);
  if (model.sparse_tables_size() == 0) return hash.Digest();
  // A line without a tab: no tensor's line looks like it.
  hash.Add("sparse\n");
  std::vector<const v1::SparseTableSpec*> tables;
  tables.reserve(model.sparse_tables_size());
  for (const auto& table : model.sparse_tables()) tables.push_back(&table);
  std::sort(tables.begin(), tables.end(),
            [](const v1::SparseTableSpec* a, const v1::SparseTableSpec* b) {
              return a->name() < b->name();
            });
  for (const v1::SparseTableSpec* table : tables) {
    hash.Add(table->name());
    hash.Add("\t");
    hash.Add(absl::StrCat(table->dim()));
    hash.Add("\n");
  }
  return hash.Digest();
}

std::vector<float> InitialBlockValues(const TensorSpec& tensor,
                                      const BlockSpec& block, uint64_t seed) {
  std::vector<float> values(block.num_elems, 0.0f);
  double limit = 0;
  switch (tensor.init) {
    case InitKind::kZeros:
      return values;
    case InitKind::kConstant:
      std::fill(values.begin(), values.end(), tensor.value);
      return values;
    case InitKind::kFromWorker: {
      float unseeded;
      std::memcpy(&unseeded, &kUnseededBits, sizeof(unseeded));
      std::fill(values.begin(), values.end(), unseeded);
      return values;
    }
    case InitKind::kHeUniform:
      limit = std::sqrt(6.0 / static_cast<double>(tensor.fan_in));
      break;
    case InitKind::kXavierUniform:
      limit =
          std::sqrt(6.0 / static_cast<double>(tensor.fan_in + tensor.fan_out));
      break;
  }
  // seed_seq mixes the job seed with the block key, so blocks draw
  // independently.
  std::seed_seq seq{
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
      static_cast<uint32_t>(block.key), static_cast<uint32_t>(block.key >> 32)};
  std::mt19937_64 rng(seq);
  std::uniform_real_distribution<double> dist(-limit, limit);
  for (float& v : values) v = static_cast<float>(dist(rng));
  return values;
}

}  // namespace ps

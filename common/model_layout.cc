#include "common/model_layout.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {

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

absl::StatusOr<std::vector<TensorSpec>> ModelTensors(
    const v1::ModelSpec& model) {
  if (model.input_dim() < 1) {
    return absl::InvalidArgumentError("model.input_dim: must be >= 1");
  }
  if (model.num_classes() < 2) {
    return absl::InvalidArgumentError("model.num_classes: must be >= 2");
  }
  PS_ASSIGN_OR_RETURN(auto convs, CnnConvLayers(model));
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
          "model.kind: must be MLP, SOFTMAX_REGRESSION or CNN");
  }
  widths.push_back(model.num_classes());
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
    TensorSpec weight;
    weight.name = absl::StrCat("conv", i, ".weight");
    weight.shape = {conv.patch_size(), conv.filters};
    weight.init = relu ? InitKind::kHeUniform : InitKind::kXavierUniform;
    weight.fan_in = conv.patch_size();
    weight.fan_out = int64_t{conv.kernel} * conv.kernel * conv.filters;
    TensorSpec bias;
    bias.name = absl::StrCat("conv", i, ".bias");
    bias.shape = {conv.filters};
    bias.init = InitKind::kZeros;
    tensors.push_back(std::move(weight));
    tensors.push_back(std::move(bias));
  }
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const bool output_layer = i + 2 == widths.size();
    TensorSpec weight;
    weight.name = absl::StrCat("dense", i, ".weight");
    weight.shape = {widths[i], widths[i + 1]};
    weight.init = (relu && !output_layer) ? InitKind::kHeUniform
                                          : InitKind::kXavierUniform;
    weight.fan_in = widths[i];
    weight.fan_out = widths[i + 1];
    TensorSpec bias;
    bias.name = absl::StrCat("dense", i, ".bias");
    bias.shape = {widths[i + 1]};
    bias.init = InitKind::kZeros;
    tensors.push_back(std::move(weight));
    tensors.push_back(std::move(bias));
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

std::vector<float> InitialBlockValues(const TensorSpec& tensor,
                                      const BlockSpec& block, uint64_t seed) {
  std::vector<float> values(block.num_elems, 0.0f);
  double limit = 0;
  switch (tensor.init) {
    case InitKind::kZeros:
      return values;
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

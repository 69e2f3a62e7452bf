// The tensors of a model and how they are cut into blocks
// (docs/architecture.md, "Model, blocks and the shard map").
#ifndef PS_COMMON_MODEL_LAYOUT_H_
#define PS_COMMON_MODEL_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"

namespace ps {

// How a tensor's initial values are drawn.
enum class InitKind {
  kZeros,          // Biases.
  kHeUniform,      // U(-sqrt(6/fan_in), +sqrt(6/fan_in)): ReLU layers.
  kXavierUniform,  // U(-sqrt(6/(fan_in+fan_out)), ...): tanh, sigmoid, softmax.
};

// One named dense float32 tensor of a model.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  InitKind init = InitKind::kZeros;
  int64_t fan_in = 0;
  int64_t fan_out = 0;

  // Product of the dimensions.
  int64_t num_elems() const;
};

// One convolution layer of a CNN with the shape of its input (HWC images):
// it maps [height, width, in_channels] to [height, width, filters] ("same"
// padding), and the 2x2 max pooling after it to [height / 2, width / 2,
// filters].
struct ConvGeometry {
  int height = 0;
  int width = 0;
  int in_channels = 0;
  int filters = 0;
  int kernel = 0;  // Odd.

  // Rows of the layer's weight (and columns of its im2col matrix):
  // kernel * kernel * in_channels.
  int64_t patch_size() const { return int64_t{kernel} * kernel * in_channels; }
  // Values per sample after the pooling.
  int64_t pooled_size() const {
    return int64_t{height / 2} * (width / 2) * filters;
  }
};

// The convolutions of a CNN spec, in order (empty for other kinds).
// Errors: INVALID_ARGUMENT naming the field for a missing or inconsistent
// image shape, no conv layers, an even or non-positive kernel, or an image
// pooled down to nothing.
absl::StatusOr<std::vector<ConvGeometry>> CnnConvLayers(
    const v1::ModelSpec& model);

// The tensors of `model`, in order. A CNN's conv layer i contributes
// "conv<i>.weight" of shape [kernel * kernel * in_channels, filters] (rows in
// (kernel row, kernel column, channel) order) and "conv<i>.bias" [filters].
// Then, for fully connected layer widths in, h1, ..., num_classes (in is
// input_dim, or a CNN's last pooled size), layer i contributes
// "dense<i>.weight" of shape [in, out] (row-major) and "dense<i>.bias" of
// shape [out]. Errors: INVALID_ARGUMENT for an unknown kind or non-positive
// sizes.
absl::StatusOr<std::vector<TensorSpec>> ModelTensors(
    const v1::ModelSpec& model);

// A block's key: (tensor_index << 32) | block_index.
inline uint64_t BlockKey(uint32_t tensor_index, uint32_t block_index) {
  return (static_cast<uint64_t>(tensor_index) << 32) | block_index;
}
inline uint32_t TensorIndexOf(uint64_t key) { return key >> 32; }
inline uint32_t BlockIndexOf(uint64_t key) { return key & 0xffffffffu; }

// One block of one tensor: elements [offset, offset + num_elems).
struct BlockSpec {
  uint64_t key = 0;
  uint32_t tensor_index = 0;
  int64_t offset = 0;
  int64_t num_elems = 0;
};

// Cuts every tensor into blocks of at most `block_elems` values, in key order.
std::vector<BlockSpec> SplitIntoBlocks(const std::vector<TensorSpec>& tensors,
                                       int64_t block_elems);

// Initial values of one block, a pure function of (seed, key, tensor): every
// server computes the same values for a block wherever it is placed.
std::vector<float> InitialBlockValues(const TensorSpec& tensor,
                                      const BlockSpec& block, uint64_t seed);

}  // namespace ps

#endif  // PS_COMMON_MODEL_LAYOUT_H_

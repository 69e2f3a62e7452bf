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

// Most tensors in a model (an EXTERNAL model's, an uploaded model's), longest
// tensor name, most dimensions of a tensor.
inline constexpr int kMaxModelTensors = 4096;
inline constexpr size_t kMaxTensorNameBytes = 256;
inline constexpr int kMaxTensorRank = 8;

// How a tensor's initial values are drawn.
enum class InitKind {
  kZeros,          // Biases.
  kHeUniform,      // U(-sqrt(6/fan_in), +sqrt(6/fan_in)): ReLU layers.
  kXavierUniform,  // U(-sqrt(6/(fan_in+fan_out)), ...): tanh, sigmoid, softmax.
  kConstant,       // Every value is TensorSpec::value (EXTERNAL models).
  // Worker 0 seeds the values (EXTERNAL models, ParameterService.Seed); until
  // then every value is kUnseededBits (IsUnseeded).
  kFromWorker,
};

// The float32 bits of a value not yet seeded: a quiet NaN with a payload no
// arithmetic produces (operations on NaN give the default NaN, 0x7fc00000,
// or propagate an operand's). Kept in the blocks themselves, so that the
// state "not yet seeded" is persisted and restored with them.
inline constexpr uint32_t kUnseededBits = 0x7fc5eed0u;

// True if `values` is a block of a FROM_WORKER tensor not yet seeded (its
// first value holds kUnseededBits; a block is seeded as a whole).
bool IsUnseeded(const std::vector<float>& values);

// One named dense float32 tensor of a model.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  InitKind init = InitKind::kZeros;
  int64_t fan_in = 0;
  int64_t fan_out = 0;
  float value = 0;  // kConstant's value.
  // A module buffer (TensorDecl.buffer, EXTERNAL models only): servers add
  // the pushed changes instead of running the optimizer, and ModelDigest
  // leaves it out.
  bool buffer = false;

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

// The tensors of `model`, in order. An EXTERNAL model's are its `tensors`
// as declared (fans derived where 0, see TensorDecl; an unspecified init is
// kFromWorker); errors name the field ("model.tensors[2].shape[0]: must be
// >= 1"): no tensors or more than kMaxModelTensors, an empty, too long,
// repeated or non-printable name, too many dimensions, a dimension < 1, a
// negative fan, an unknown init, a value set for an init other than
// CONSTANT, or a built-in model's field set. A CNN's conv layer i contributes
// "conv<i>.weight" of shape [kernel * kernel * in_channels, filters] (rows in
// (kernel row, kernel column, channel) order) and "conv<i>.bias" [filters].
// Then, for fully connected layer widths in, h1, ..., num_classes (in is
// input_dim, or a CNN's last pooled size), layer i contributes
// "dense<i>.weight" of shape [in, out] (row-major) and "dense<i>.bias" of
// shape [out]. Errors: INVALID_ARGUMENT for an unknown kind or non-positive
// sizes.
absl::StatusOr<std::vector<TensorSpec>> ModelTensors(
    const v1::ModelSpec& model);

// The digest of a model's tensor names and shapes, as Python workers send it
// (RegisterRequest.model_digest): "fnv1a64:" and 16 lower-case hex digits of
// the 64-bit FNV-1a hash of, for each tensor in name order (bytewise), its
// name, a tab, its dimensions in decimal joined by ",", and a newline.
// Workers match tensors by name, so the order of a spec's tensors does not
// matter. Buffers (TensorSpec::buffer) are left out: a worker's module is
// matched to a job by its parameters, with or without its buffers declared.
std::string ModelDigest(const std::vector<TensorSpec>& tensors);

// The digest of a model spec whose tensors are `tensors`: ModelDigest(tensors)
// when the model holds no sparse tables; otherwise the same hash continued
// with the line "sparse" and, for each table in name order (bytewise), its
// name, a tab, its dim in decimal and a newline (a Python worker's sharded
// embedding modules declare their tables by name and dim;
// paramserver.layout.model_digest). Thread-safe; never fails.
std::string ModelDigest(const std::vector<TensorSpec>& tensors,
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
// server computes the same values for a block wherever it is placed. A
// kFromWorker tensor's blocks hold kUnseededBits until worker 0 seeds them.
std::vector<float> InitialBlockValues(const TensorSpec& tensor,
                                      const BlockSpec& block, uint64_t seed);

}  // namespace ps

#endif  // PS_COMMON_MODEL_LAYOUT_H_

// The shape of a CTR model (ModelSpec.CTR, docs/sparse.md "The CTR model"):
// which table each field reads, the MLPs' widths and the interaction's
// width. One home for these rules: ModelTensors and the worker's CtrModel
// both derive from CtrModelLayout.
#ifndef PS_COMMON_CTR_LAYOUT_H_
#define PS_COMMON_CTR_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_layout.h"
#include "common/sparse_spec.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Most categorical fields of a CTR model.
inline constexpr int kMaxCtrFields = 1024;

// A validated CTR model's shape.
struct CtrLayout {
  int num_fields = 0;
  // The dim shared by every table a field uses.
  int dim = 0;
  // Field f reads sparse table field_tables[f] (resolved: num_fields
  // entries, each an index of model.sparse_tables).
  std::vector<int> field_tables;
  // The bottom MLP's widths, its input (input_dim) first and dim last;
  // empty when the spec has no bottom MLP (the dense features are skipped).
  std::vector<int64_t> bottom_widths;
  // The top MLP's widths: interaction_width first, 1 (the logit) last.
  std::vector<int64_t> top_widths;
  bool dot = true;    // DOT (or INTERACTION_UNSPECIFIED); false: CONCAT.
  bool mean = false;  // MEAN pooling; false: SUM (or POOLING_UNSPECIFIED).

  bool has_bottom() const { return !bottom_widths.empty(); }
  // The vectors that meet in the interaction: the bottom output (if any),
  // then the fields' pooled vectors.
  int num_vectors() const { return num_fields + (has_bottom() ? 1 : 0); }
  // The interaction's output width (the top MLP's input):
  //   DOT:    (bottom ? dim : 0) + V (V - 1) / 2, V = num_vectors();
  //   CONCAT: (bottom ? dim : 0) + num_fields * dim.
  int64_t interaction_width() const { return top_widths.front(); }
};

// The shape of a CTR model spec. Errors: INVALID_ARGUMENT naming the field:
// a kind other than CTR; hidden_layers, conv_layers, image or tensors set;
// an activation other than unset or RELU; input_dim < 1; num_classes != 2;
// no sparse_tables or more than kMaxSparseTables; num_fields outside
// [1, kMaxCtrFields]; field_tables neither empty nor num_fields entries, or
// an entry that is not a table index; field_tables empty with a number of
// tables other than 1 or num_fields; a used table's dim outside
// [1, kMaxSparseDim] or differing from another used table's; a bottom_mlp
// or top_mlp width < 1; a bottom_mlp whose last width differs from dim; an
// unknown pooling or interaction; DOT without a bottom MLP and fewer than 2
// fields (no pairs). Does not check the tables' other fields (names,
// optimizers: ValidateJobSpec does).
absl::StatusOr<CtrLayout> CtrModelLayout(const v1::ModelSpec& model);

// The dense tensors of a CTR model (ModelTensors for kind CTR): for the
// bottom MLP's layer i, "bottom<i>.weight" [in, out] (He uniform) and
// "bottom<i>.bias" [out] (zeros); then for the top MLP's layer i,
// "top<i>.weight" and "top<i>.bias" likewise, the last layer (out 1)
// Xavier uniform. The sparse tables are not tensors. Errors: those of
// CtrModelLayout.
absl::StatusOr<std::vector<TensorSpec>> CtrModelTensors(
    const v1::ModelSpec& model);

}  // namespace ps

#endif  // PS_COMMON_CTR_LAYOUT_H_

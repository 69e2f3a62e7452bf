#include "common/ctr_layout.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

absl::Status Invalid(const std::string& field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// The ModelSpec fields a CTR model does not use, and the fixed ones.
absl::Status CheckCtrModelFields(const v1::ModelSpec& model) {
  if (model.kind() != v1::ModelSpec::CTR) {
    return Invalid("model.kind", "not CTR");
  }
  if (model.hidden_layers_size() > 0) {
    return Invalid("model.hidden_layers",
                   "a CTR model has ctr.bottom_mlp and ctr.top_mlp instead");
  }
  if (model.conv_layers_size() > 0) {
    return Invalid("model.conv_layers", "a CTR model does not use it");
  }
  if (model.has_image()) {
    return Invalid("model.image", "a CTR model does not use it");
  }
  if (model.tensors_size() > 0) {
    return Invalid("model.tensors", "only an EXTERNAL model lists its tensors");
  }
  if (model.activation() != v1::ACTIVATION_UNSPECIFIED &&
      model.activation() != v1::RELU) {
    return Invalid("model.activation",
                   "a CTR model's MLPs use ReLU (leave it unset or RELU)");
  }
  if (model.input_dim() < 1) {
    return Invalid("model.input_dim",
                   "must be >= 1 (the number of dense features)");
  }
  if (model.num_classes() != 2) {
    return Invalid("model.num_classes", "a CTR model needs 2 (click or not)");
  }
  if (model.sparse_tables_size() == 0) {
    return Invalid("model.sparse_tables", "a CTR model needs at least one");
  }
  if (model.sparse_tables_size() > kMaxSparseTables) {
    return Invalid("model.sparse_tables",
                   absl::StrCat("more than ", kMaxSparseTables, " tables"));
  }
  return absl::OkStatus();
}

// Resolves field_tables into layout->field_tables and checks the used
// tables' dims into layout->dim.
absl::Status ResolveFieldTables(const v1::ModelSpec& model, CtrLayout* layout) {
  const v1::CtrModelSpec& ctr = model.ctr();
  const int tables = model.sparse_tables_size();
  const int fields = layout->num_fields;
  layout->field_tables.resize(fields);
  if (ctr.field_tables_size() == 0) {
    if (tables != 1 && tables != fields) {
      return Invalid("model.ctr.field_tables",
                     absl::StrCat("empty needs 1 or num_fields (", fields,
                                  ") sparse tables, the model has ", tables));
    }
    for (int f = 0; f < fields; ++f) {
      layout->field_tables[f] = tables == 1 ? 0 : f;
    }
  } else {
    if (ctr.field_tables_size() != fields) {
      return Invalid(
          "model.ctr.field_tables",
          absl::StrCat("has ", ctr.field_tables_size(),
                       " entries, needs num_fields (", fields, ") or none"));
    }
    for (int f = 0; f < fields; ++f) {
      const int t = ctr.field_tables(f);
      if (t < 0 || t >= tables) {
        return Invalid(
            absl::StrCat("model.ctr.field_tables[", f, "]"),
            absl::StrCat("must be a table index in [0, ", tables, ")"));
      }
      layout->field_tables[f] = t;
    }
  }
  for (int f = 0; f < fields; ++f) {
    const int t = layout->field_tables[f];
    const int dim = model.sparse_tables(t).dim();
    const std::string field = absl::StrCat("model.sparse_tables[", t, "].dim");
    if (dim < 1 || dim > kMaxSparseDim) {
      return Invalid(field,
                     absl::StrCat("must be in [1, ", kMaxSparseDim, "]"));
    }
    if (f == 0) {
      layout->dim = dim;
    } else if (dim != layout->dim) {
      return Invalid(field,
                     absl::StrCat("is ", dim, ", but table ",
                                  layout->field_tables[0], " has ", layout->dim,
                                  ": every table of a CTR model's fields needs "
                                  "the same dim"));
    }
  }
  return absl::OkStatus();
}

// Appends `widths` (each >= 1) to *out; `field` names the repeated field.
absl::Status AppendWidths(
    const google::protobuf::RepeatedField<int32_t>& widths,
    const std::string& field, std::vector<int64_t>* out) {
  for (int i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1) {
      return Invalid(absl::StrCat(field, "[", i, "]"), "must be >= 1");
    }
    out->push_back(widths[i]);
  }
  return absl::OkStatus();
}

// The MLPs' widths and the interaction.
absl::Status SetWidths(const v1::ModelSpec& model, CtrLayout* layout) {
  const v1::CtrModelSpec& ctr = model.ctr();
  switch (ctr.pooling()) {
    case v1::CtrModelSpec::POOLING_UNSPECIFIED:
    case v1::CtrModelSpec::SUM:
      layout->mean = false;
      break;
    case v1::CtrModelSpec::MEAN:
      layout->mean = true;
      break;
    default:
      return Invalid("model.ctr.pooling", "must be SUM or MEAN");
  }
  switch (ctr.interaction()) {
    case v1::CtrModelSpec::INTERACTION_UNSPECIFIED:
    case v1::CtrModelSpec::DOT:
      layout->dot = true;
      break;
    case v1::CtrModelSpec::CONCAT:
      layout->dot = false;
      break;
    default:
      return Invalid("model.ctr.interaction", "must be DOT or CONCAT");
  }
  if (ctr.bottom_mlp_size() > 0) {
    layout->bottom_widths.push_back(model.input_dim());
    PS_RETURN_IF_ERROR(AppendWidths(ctr.bottom_mlp(), "model.ctr.bottom_mlp",
                                    &layout->bottom_widths));
    if (layout->bottom_widths.back() != layout->dim) {
      return Invalid(
          absl::StrCat("model.ctr.bottom_mlp[", ctr.bottom_mlp_size() - 1, "]"),
          absl::StrCat("is ", layout->bottom_widths.back(),
                       ", must equal the tables' dim ", layout->dim));
    }
  }
  const int64_t bottom = layout->has_bottom() ? layout->dim : 0;
  int64_t width = 0;
  if (layout->dot) {
    const int64_t v = layout->num_vectors();
    if (v < 2) {
      return Invalid("model.ctr.num_fields",
                     "DOT without a bottom MLP needs at least 2 fields (it "
                     "has no pairs otherwise)");
    }
    width = bottom + v * (v - 1) / 2;
  } else {
    width = bottom + int64_t{layout->num_fields} * layout->dim;
  }
  layout->top_widths.push_back(width);
  PS_RETURN_IF_ERROR(
      AppendWidths(ctr.top_mlp(), "model.ctr.top_mlp", &layout->top_widths));
  layout->top_widths.push_back(1);
  return absl::OkStatus();
}

// A layer's weight [in, out] and bias [out] tensors, named <layer>.weight
// and <layer>.bias (as ModelTensors names a dense layer's).
void AddLayer(const std::string& layer, int64_t in, int64_t out, InitKind init,
              std::vector<TensorSpec>* tensors) {
  TensorSpec weight;
  weight.name = absl::StrCat(layer, ".weight");
  weight.shape = {in, out};
  weight.init = init;
  weight.fan_in = in;
  weight.fan_out = out;
  TensorSpec bias;
  bias.name = absl::StrCat(layer, ".bias");
  bias.shape = {out};
  bias.init = InitKind::kZeros;
  tensors->push_back(std::move(weight));
  tensors->push_back(std::move(bias));
}

}  // namespace

absl::StatusOr<CtrLayout> CtrModelLayout(const v1::ModelSpec& model) {
  PS_RETURN_IF_ERROR(CheckCtrModelFields(model));
  CtrLayout layout;
  layout.num_fields = model.ctr().num_fields();
  if (layout.num_fields < 1 || layout.num_fields > kMaxCtrFields) {
    return Invalid("model.ctr.num_fields",
                   absl::StrCat("must be in [1, ", kMaxCtrFields, "]"));
  }
  PS_RETURN_IF_ERROR(ResolveFieldTables(model, &layout));
  PS_RETURN_IF_ERROR(SetWidths(model, &layout));
  return layout;
}

absl::StatusOr<std::vector<TensorSpec>> CtrModelTensors(
    const v1::ModelSpec& model) {
  PS_ASSIGN_OR_RETURN(const CtrLayout layout, CtrModelLayout(model));
  std::vector<TensorSpec> tensors;
  const std::vector<int64_t>& bottom = layout.bottom_widths;
  for (size_t i = 0; i + 1 < bottom.size(); ++i) {
    AddLayer(absl::StrCat("bottom", i), bottom[i], bottom[i + 1],
             InitKind::kHeUniform, &tensors);
  }
  const std::vector<int64_t>& top = layout.top_widths;
  for (size_t i = 0; i + 1 < top.size(); ++i) {
    const bool output_layer = i + 2 == top.size();
    AddLayer(absl::StrCat("top", i), top[i], top[i + 1],
             output_layer ? InitKind::kXavierUniform : InitKind::kHeUniform,
             &tensors);
  }
  return tensors;
}

}  // namespace ps

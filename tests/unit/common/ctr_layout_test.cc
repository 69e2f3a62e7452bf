// The CTR model's layout and dense tensors (ModelTensors for kind CTR), and
// each validation error naming its field.
#include "common/ctr_layout.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 3 fields, 3 tables of dim 4, 13 dense features, bottom [8, 4], top [8].
v1::ModelSpec Ctr(v1::CtrModelSpec::Interaction interaction) {
  v1::ModelSpec model;
  model.set_kind(v1::ModelSpec::CTR);
  model.set_input_dim(13);
  model.set_num_classes(2);
  for (int t = 0; t < 3; ++t) {
    v1::SparseTableSpec* table = model.add_sparse_tables();
    table->set_name("t" + std::to_string(t));
    table->set_dim(4);
  }
  v1::CtrModelSpec* ctr = model.mutable_ctr();
  ctr->set_num_fields(3);
  ctr->add_bottom_mlp(8);
  ctr->add_bottom_mlp(4);
  ctr->add_top_mlp(8);
  ctr->set_interaction(interaction);
  return model;
}

TEST(CtrLayoutTest, DotWithBottomMlpTensors) {
  auto tensors = ModelTensors(Ctr(v1::CtrModelSpec::DOT));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  const std::vector<TensorSpec>& t = *tensors;
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t[0].name, "bottom0.weight");
  EXPECT_THAT(t[0].shape, ElementsAre(13, 8));
  EXPECT_EQ(t[0].init, InitKind::kHeUniform);
  EXPECT_EQ(t[0].fan_in, 13);
  EXPECT_EQ(t[0].fan_out, 8);
  EXPECT_EQ(t[1].name, "bottom0.bias");
  EXPECT_THAT(t[1].shape, ElementsAre(8));
  EXPECT_EQ(t[1].init, InitKind::kZeros);
  EXPECT_EQ(t[2].name, "bottom1.weight");
  EXPECT_THAT(t[2].shape, ElementsAre(8, 4));
  EXPECT_EQ(t[3].name, "bottom1.bias");
  // V = 4 vectors (bottom output and 3 fields): 4 + 4 * 3 / 2 = 10.
  EXPECT_EQ(t[4].name, "top0.weight");
  EXPECT_THAT(t[4].shape, ElementsAre(10, 8));
  EXPECT_EQ(t[4].init, InitKind::kHeUniform);
  EXPECT_EQ(t[5].name, "top0.bias");
  EXPECT_EQ(t[6].name, "top1.weight");
  EXPECT_THAT(t[6].shape, ElementsAre(8, 1));
  EXPECT_EQ(t[6].init, InitKind::kXavierUniform);
  EXPECT_EQ(t[6].fan_in, 8);
  EXPECT_EQ(t[6].fan_out, 1);
  EXPECT_EQ(t[7].name, "top1.bias");
  EXPECT_THAT(t[7].shape, ElementsAre(1));

  auto layout = CtrModelLayout(Ctr(v1::CtrModelSpec::INTERACTION_UNSPECIFIED));
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(layout->dot);  // Unspecified is DOT.
  EXPECT_FALSE(layout->mean);
  EXPECT_EQ(layout->dim, 4);
  EXPECT_EQ(layout->num_vectors(), 4);
  EXPECT_EQ(layout->interaction_width(), 10);
  EXPECT_THAT(layout->field_tables, ElementsAre(0, 1, 2));
  EXPECT_THAT(layout->bottom_widths, ElementsAre(13, 8, 4));
  EXPECT_THAT(layout->top_widths, ElementsAre(10, 8, 1));
}

TEST(CtrLayoutTest, InteractionWidths) {
  // CONCAT with a bottom MLP: 4 + 3 * 4.
  auto layout = CtrModelLayout(Ctr(v1::CtrModelSpec::CONCAT));
  ASSERT_TRUE(layout.ok());
  EXPECT_FALSE(layout->dot);
  EXPECT_EQ(layout->interaction_width(), 16);

  // Without a bottom MLP the dense features are skipped: CONCAT 3 * 4, DOT
  // 3 * 2 / 2 over the fields' vectors only.
  v1::ModelSpec spec = Ctr(v1::CtrModelSpec::CONCAT);
  spec.mutable_ctr()->clear_bottom_mlp();
  layout = CtrModelLayout(spec);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->interaction_width(), 12);
  spec.mutable_ctr()->set_interaction(v1::CtrModelSpec::DOT);
  layout = CtrModelLayout(spec);
  ASSERT_TRUE(layout.ok());
  EXPECT_FALSE(layout->has_bottom());
  EXPECT_EQ(layout->num_vectors(), 3);
  EXPECT_EQ(layout->interaction_width(), 3);
  auto tensors = ModelTensors(spec);
  ASSERT_TRUE(tensors.ok());
  ASSERT_EQ(tensors->size(), 4u);  // top0 and top1 only.
  EXPECT_EQ((*tensors)[0].name, "top0.weight");
  EXPECT_THAT((*tensors)[0].shape, ElementsAre(3, 8));

  // No top hidden layers: the interaction feeds the logit directly.
  spec = Ctr(v1::CtrModelSpec::DOT);
  spec.mutable_ctr()->clear_top_mlp();
  tensors = ModelTensors(spec);
  ASSERT_TRUE(tensors.ok());
  ASSERT_EQ(tensors->size(), 6u);
  EXPECT_EQ((*tensors)[4].name, "top0.weight");
  EXPECT_THAT((*tensors)[4].shape, ElementsAre(10, 1));
  EXPECT_EQ((*tensors)[4].init, InitKind::kXavierUniform);
}

TEST(CtrLayoutTest, FieldTables) {
  // One table: every field reads it.
  v1::ModelSpec spec = Ctr(v1::CtrModelSpec::DOT);
  spec.mutable_sparse_tables()->DeleteSubrange(1, 2);
  auto layout = CtrModelLayout(spec);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->field_tables, ElementsAre(0, 0, 0));
  // Explicit: fields 0 and 2 share table 1; table 0 and 2 unused may have
  // another dim.
  spec = Ctr(v1::CtrModelSpec::DOT);
  spec.mutable_ctr()->add_field_tables(1);
  spec.mutable_ctr()->add_field_tables(2);
  spec.mutable_ctr()->add_field_tables(1);
  spec.mutable_sparse_tables(0)->set_dim(7);
  layout = CtrModelLayout(spec);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->field_tables, ElementsAre(1, 2, 1));
}

// Each invalid spec and the field its error names.
TEST(CtrLayoutTest, ValidationErrorsNameTheField) {
  struct Case {
    std::string what;
    std::function<void(v1::ModelSpec*)> change;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"hidden layers", [](auto* m) { m->add_hidden_layers(4); },
       "model.hidden_layers:"},
      {"conv layers", [](auto* m) { m->add_conv_layers()->set_filters(2); },
       "model.conv_layers:"},
      {"image", [](auto* m) { m->mutable_image()->set_height(2); },
       "model.image:"},
      {"tensors", [](auto* m) { m->add_tensors()->set_name("x"); },
       "model.tensors:"},
      {"tanh", [](auto* m) { m->set_activation(v1::TANH); },
       "model.activation:"},
      {"no dense", [](auto* m) { m->set_input_dim(0); }, "model.input_dim:"},
      {"3 classes", [](auto* m) { m->set_num_classes(3); },
       "model.num_classes:"},
      {"no tables", [](auto* m) { m->clear_sparse_tables(); },
       "model.sparse_tables:"},
      {"0 fields", [](auto* m) { m->mutable_ctr()->set_num_fields(0); },
       "model.ctr.num_fields:"},
      {"1025 fields", [](auto* m) { m->mutable_ctr()->set_num_fields(1025); },
       "model.ctr.num_fields:"},
      {"2 tables for 3 fields",
       [](auto* m) { m->mutable_sparse_tables()->RemoveLast(); },
       "model.ctr.field_tables:"},
      {"field_tables too short",
       [](auto* m) { m->mutable_ctr()->add_field_tables(0); },
       "model.ctr.field_tables:"},
      {"field table out of range",
       [](auto* m) {
         for (int t : {0, 3, 1}) m->mutable_ctr()->add_field_tables(t);
       },
       "model.ctr.field_tables[1]:"},
      {"negative field table",
       [](auto* m) {
         for (int t : {-1, 0, 1}) m->mutable_ctr()->add_field_tables(t);
       },
       "model.ctr.field_tables[0]:"},
      {"dim 0", [](auto* m) { m->mutable_sparse_tables(1)->set_dim(0); },
       "model.sparse_tables[1].dim:"},
      {"dim 1025", [](auto* m) { m->mutable_sparse_tables(0)->set_dim(1025); },
       "model.sparse_tables[0].dim:"},
      {"dims differ", [](auto* m) { m->mutable_sparse_tables(2)->set_dim(8); },
       "model.sparse_tables[2].dim:"},
      {"bottom width 0",
       [](auto* m) { m->mutable_ctr()->set_bottom_mlp(0, 0); },
       "model.ctr.bottom_mlp[0]:"},
      {"bottom last != dim",
       [](auto* m) { m->mutable_ctr()->set_bottom_mlp(1, 5); },
       "model.ctr.bottom_mlp[1]:"},
      {"top width 0", [](auto* m) { m->mutable_ctr()->set_top_mlp(0, -2); },
       "model.ctr.top_mlp[0]:"},
      {"pooling",
       [](auto* m) {
         m->mutable_ctr()->set_pooling(
             static_cast<v1::CtrModelSpec::Pooling>(9));
       },
       "model.ctr.pooling:"},
      {"interaction",
       [](auto* m) {
         m->mutable_ctr()->set_interaction(
             static_cast<v1::CtrModelSpec::Interaction>(9));
       },
       "model.ctr.interaction:"},
      {"DOT, one field, no bottom",
       [](auto* m) {
         m->mutable_ctr()->set_num_fields(1);
         m->mutable_ctr()->clear_bottom_mlp();
         m->mutable_sparse_tables()->DeleteSubrange(1, 2);
       },
       "model.ctr.num_fields:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::ModelSpec spec = Ctr(v1::CtrModelSpec::DOT);
    c.change(&spec);
    auto tensors = ModelTensors(spec);
    ASSERT_FALSE(tensors.ok());
    EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(tensors.status().message()),
                ::testing::StartsWith(c.field));
  }
  // More than 1024 fields with one table.
  v1::ModelSpec spec = Ctr(v1::CtrModelSpec::DOT);
  spec.mutable_sparse_tables()->DeleteSubrange(1, 2);
  spec.mutable_ctr()->set_num_fields(1025);
  EXPECT_THAT(ModelTensors(spec).status().message(),
              HasSubstr("model.ctr.num_fields: must be in [1, 1024]"));
  // DOT with one field is fine with a bottom MLP (one pair).
  spec.mutable_ctr()->set_num_fields(1);
  auto layout = CtrModelLayout(spec);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->interaction_width(), 4 + 1);
}

TEST(CtrLayoutTest, OtherKindsRefuseTheCtrField) {
  v1::ModelSpec mlp;
  mlp.set_kind(v1::ModelSpec::MLP);
  mlp.set_input_dim(4);
  mlp.set_num_classes(2);
  ASSERT_TRUE(ModelTensors(mlp).ok());
  mlp.mutable_ctr()->set_num_fields(2);
  EXPECT_THAT(ModelTensors(mlp).status().message(), HasSubstr("model.ctr:"));
}

}  // namespace
}  // namespace ps

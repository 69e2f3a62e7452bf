// The sparse part of job specs: defaults filled once at submit, one test per
// validation rule (each message names the field), and the bucket loads the
// shard map balances.
#include "common/sparse_spec.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/sparse_keys.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_files.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::SparseTableSpec* AddTable(v1::ModelSpec* model, const std::string& name,
                              int dim) {
  v1::SparseTableSpec* t = model->add_sparse_tables();
  t->set_name(name);
  t->set_dim(dim);
  t->mutable_optimizer()->mutable_rowwise_adagrad()->set_learning_rate(0.05f);
  return t;
}

// An EXTERNAL model (a PyTorch module's) with two dense tensors and two
// sparse tables; defaults not applied.
v1::JobSpec ExternalSparseSpec() {
  v1::JobSpec spec;
  spec.set_name("external-sparse");
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* w = model->add_tensors();
  w->set_name("top.weight");
  w->add_shape(1);
  w->add_shape(32);
  v1::TensorDecl* b = model->add_tensors();
  b->set_name("top.bias");
  b->add_shape(1);
  AddTable(model, "users", 16);
  AddTable(model, "items", 16);
  spec.set_epochs(1);
  spec.set_batch_size(256);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  return spec;
}

// The CTR job of docs/sparse.md and deploy/jobs/criteo-ctr.json: 26 tables of
// dim 16, row-wise Adagrad, bottom [64, 16], top [64, 32], DOT, CRITEO data.
v1::JobSpec CtrSpec() {
  v1::JobSpec spec;
  spec.set_name("criteo-dlrm");
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::CTR);
  model->set_input_dim(kCriteoDenseFeatures);
  model->set_num_classes(2);
  for (int f = 0; f < kCriteoFields; ++f) {
    AddTable(model, "C" + std::to_string(f + 1), 16);
  }
  v1::CtrModelSpec* ctr = model->mutable_ctr();
  ctr->set_num_fields(kCriteoFields);
  ctr->add_bottom_mlp(64);
  ctr->add_bottom_mlp(16);
  ctr->add_top_mlp(64);
  ctr->add_top_mlp(32);
  ctr->set_pooling(v1::CtrModelSpec::SUM);
  ctr->set_interaction(v1::CtrModelSpec::DOT);
  v1::DatasetSpec* data = spec.mutable_dataset();
  data->set_format(v1::DatasetSpec::CRITEO);
  data->set_train_file("/usr/share/datasets/criteo/train.txt");
  data->set_test_file("/usr/share/datasets/criteo/test.txt");
  spec.set_epochs(1);
  spec.set_batch_size(2048);
  spec.set_seed(42);
  spec.mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.01f);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(2);
  spec.set_num_servers(2);
  spec.set_durability(v1::WAL);
  return spec;
}

v1::JobSpec Defaulted(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  return spec;
}

TEST(SparseSpecDefaultsTest, BucketsAre64PerServerRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(DefaultNumBuckets(1, 1), 64);
  EXPECT_EQ(DefaultNumBuckets(2, 1), 128);
  EXPECT_EQ(DefaultNumBuckets(3, 1), 256);
  EXPECT_EQ(DefaultNumBuckets(4, 26), 256);
  EXPECT_EQ(DefaultNumBuckets(5, 26), 512);
  // Unset or out-of-range server counts count as 1 and 1024.
  EXPECT_EQ(DefaultNumBuckets(0, 1), 64);
  EXPECT_EQ(DefaultNumBuckets(1024, 1), 65536);
  EXPECT_EQ(DefaultNumBuckets(5000, 1), 65536);
  // Many tables share kMaxDefaultBucketsPerJob: 65536 / 26 rounds down to
  // 2048.
  EXPECT_EQ(DefaultNumBuckets(1024, 26), 2048);
  EXPECT_EQ(DefaultNumBuckets(16, 26), 1024);
  EXPECT_EQ(DefaultNumBuckets(64, 26), 2048);
  EXPECT_EQ(DefaultNumBuckets(1024, kMaxSparseTables), 64);
  EXPECT_EQ(DefaultNumBuckets(4, kMaxSparseTables), 64);
}

TEST(SparseSpecDefaultsTest, SubmitFillsEveryTable) {
  v1::JobSpec spec = ExternalSparseSpec();
  spec.set_num_servers(3);
  v1::ModelSpec* model = spec.mutable_model();
  model->mutable_sparse_tables(1)->mutable_init()->set_kind(
      v1::SparseInit::NORMAL);
  ApplyJobSpecDefaults(&spec);
  const v1::SparseTableSpec& users = spec.model().sparse_tables(0);
  EXPECT_EQ(users.num_buckets(), 256);
  EXPECT_EQ(users.expected_rows(), kDefaultExpectedRows);
  EXPECT_EQ(users.init().kind(), v1::SparseInit::UNIFORM);
  EXPECT_FLOAT_EQ(users.init().scale(), 0.25f);  // 1 / sqrt(16).
  EXPECT_FLOAT_EQ(users.optimizer().rowwise_adagrad().epsilon(), 1e-10f);
  EXPECT_FALSE(users.has_eviction());
  EXPECT_FALSE(users.has_admission());
  const v1::SparseTableSpec& items = spec.model().sparse_tables(1);
  EXPECT_EQ(items.init().kind(), v1::SparseInit::NORMAL);
  EXPECT_FLOAT_EQ(items.init().scale(), 0.01f);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // Once filled, nothing changes: a later load applies them again.
  v1::JobSpec again = spec;
  again.set_num_servers(16);
  ApplyJobSpecDefaults(&again);
  EXPECT_EQ(again.model().sparse_tables(0).num_buckets(), 256);
  EXPECT_EQ(again.model().sparse_tables(0).init().scale(), 0.25f);
}

TEST(SparseSpecDefaultsTest, OptimizerDefaults) {
  v1::JobSpec spec = ExternalSparseSpec();
  v1::ModelSpec* model = spec.mutable_model();
  model->mutable_sparse_tables(0)
      ->mutable_optimizer()
      ->mutable_adagrad()
      ->set_learning_rate(0.1f);
  model->mutable_sparse_tables(1)
      ->mutable_optimizer()
      ->mutable_lazy_adam()
      ->set_learning_rate(0.001f);
  AddTable(model, "ftrl", 1)
      ->mutable_optimizer()
      ->mutable_ftrl()
      ->set_alpha(0.05f);
  AddTable(model, "sgd", 4)
      ->mutable_optimizer()
      ->mutable_sgd()
      ->set_learning_rate(0.5f);
  ApplyJobSpecDefaults(&spec);
  EXPECT_FLOAT_EQ(spec.model().sparse_tables(0).optimizer().adagrad().epsilon(),
                  1e-10f);
  const v1::AdamOptions& adam =
      spec.model().sparse_tables(1).optimizer().lazy_adam();
  EXPECT_FLOAT_EQ(adam.beta1(), 0.9f);
  EXPECT_FLOAT_EQ(adam.beta2(), 0.999f);
  EXPECT_FLOAT_EQ(adam.epsilon(), 1e-8f);
  EXPECT_FLOAT_EQ(spec.model().sparse_tables(2).optimizer().ftrl().beta(), 1);
  EXPECT_FLOAT_EQ(spec.model().sparse_tables(2).init().scale(), 1);
  EXPECT_EQ(spec.model().sparse_tables(3).optimizer().sgd().momentum(), 0);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(SparseSpecDefaultsTest, SetValuesAreKept) {
  v1::JobSpec spec = ExternalSparseSpec();
  v1::SparseTableSpec* t = spec.mutable_model()->mutable_sparse_tables(0);
  t->set_num_buckets(8);
  t->set_expected_rows(1000);
  t->mutable_init()->set_kind(v1::SparseInit::ZEROS);
  t->mutable_optimizer()->mutable_rowwise_adagrad()->set_epsilon(1e-3f);
  t->mutable_eviction()->set_max_rows_per_server(100);
  v1::SparseTableSpec* lfu = spec.mutable_model()->mutable_sparse_tables(1);
  lfu->mutable_eviction()->set_max_rows_per_server(100);
  lfu->mutable_eviction()->set_policy(v1::EvictionSpec::LFU);
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(t->num_buckets(), 8);
  EXPECT_EQ(t->expected_rows(), 1000);
  EXPECT_EQ(t->init().scale(), 0);  // ZEROS has none.
  EXPECT_FLOAT_EQ(t->optimizer().rowwise_adagrad().epsilon(), 1e-3f);
  EXPECT_EQ(t->eviction().policy(), v1::EvictionSpec::LRU);  // A cap: LRU.
  EXPECT_EQ(lfu->eviction().policy(), v1::EvictionSpec::LFU);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(SparseSpecTest, StateFloatsAndBucketLoadPerOptimizer) {
  v1::SparseTableSpec t;
  t.set_dim(16);
  t.set_num_buckets(64);
  t.set_expected_rows(1000);  // 16 rows a bucket (15.6 rounded up).
  EXPECT_EQ(SparseStateFloatsPerRow(t), 0);  // No optimizer.
  t.mutable_optimizer()->mutable_sgd();
  EXPECT_EQ(SparseStateFloatsPerRow(t), 0);
  EXPECT_EQ(BucketLoad(t), 16 * 16);
  t.mutable_optimizer()->mutable_adagrad();
  EXPECT_EQ(SparseStateFloatsPerRow(t), 16);
  EXPECT_EQ(BucketLoad(t), 16 * 32);
  t.mutable_optimizer()->mutable_rowwise_adagrad();
  EXPECT_EQ(SparseStateFloatsPerRow(t), 1);
  EXPECT_EQ(BucketLoad(t), 16 * 17);
  t.mutable_optimizer()->mutable_lazy_adam();
  EXPECT_EQ(SparseStateFloatsPerRow(t), 33);
  EXPECT_EQ(BucketLoad(t), 16 * 49);
  t.mutable_optimizer()->mutable_ftrl();
  EXPECT_EQ(SparseStateFloatsPerRow(t), 32);
  EXPECT_EQ(BucketLoad(t), 16 * 48);
  // The largest table: no overflow.
  t.set_dim(kMaxSparseDim);
  t.set_num_buckets(1);
  t.set_expected_rows(kMaxExpectedRows);
  EXPECT_EQ(BucketLoad(t), kMaxExpectedRows * 3 * kMaxSparseDim);
}

TEST(SparseSpecTest, ValidSpecsPass) {
  v1::JobSpec spec = Defaulted(ExternalSparseSpec());
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // EXTERNAL models need no tables.
  spec.mutable_model()->clear_sparse_tables();
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(SparseSpecTest, TheExampleCtrJobPasses) {
  v1::JobSpec spec = Defaulted(CtrSpec());
  EXPECT_TRUE(ValidateSparseSpec(spec).ok()) << ValidateSparseSpec(spec);
  EXPECT_EQ(spec.model().sparse_tables(25).num_buckets(), 128);  // 2 servers.
  if (!ModelTensors(spec.model()).ok()) {
    GTEST_SKIP() << "ModelTensors does not know CTR models yet: "
                 << ModelTensors(spec.model()).status();
  }
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// One broken field and the start of the message that must name it.
struct Rule {
  std::string expected;
  std::function<void(v1::JobSpec&)> mutate;
};

v1::SparseTableSpec& Table(v1::JobSpec& spec, int i) {
  return *spec.mutable_model()->mutable_sparse_tables(i);
}

// Rules checked on the EXTERNAL spec (after defaults).
std::vector<Rule> TableRules() {
  const std::string t1 = "model.sparse_tables[1]";
  return {
      {t1 + ".name: required", [](auto& s) { Table(s, 1).clear_name(); }},
      {t1 + ".name: longer than 256 bytes",
       [](auto& s) { Table(s, 1).set_name(std::string(257, 'a')); }},
      {t1 + ".name: may hold only printable ASCII without spaces",
       [](auto& s) { Table(s, 1).set_name("two words"); }},
      {t1 + ".name: may hold only printable ASCII without spaces",
       [](auto& s) { Table(s, 1).set_name("caf\xc3\xa9"); }},
      {t1 + ".name: \"users\" names an earlier table too",
       [](auto& s) { Table(s, 1).set_name("users"); }},
      {t1 + ".dim: must be in [1, 1024], got 0",
       [](auto& s) { Table(s, 1).set_dim(0); }},
      {t1 + ".dim: must be in [1, 1024], got 1025",
       [](auto& s) { Table(s, 1).set_dim(1025); }},
      {t1 + ".init.kind: must be UNIFORM, NORMAL or ZEROS",
       [](auto& s) {
         Table(s, 1).mutable_init()->set_kind(
             static_cast<v1::SparseInit::Kind>(9));
       }},
      {t1 + ".init.scale: must be >= 0, got -1",
       [](auto& s) { Table(s, 1).mutable_init()->set_scale(-1); }},
      {t1 + ".init.scale: must be 0 (ZEROS takes no scale), got 0.5",
       [](auto& s) {
         Table(s, 1).mutable_init()->set_kind(v1::SparseInit::ZEROS);
         Table(s, 1).mutable_init()->set_scale(0.5f);
       }},
      {t1 + ".admission.min_count: must be >= 0, got -1",
       [](auto& s) { Table(s, 1).mutable_admission()->set_min_count(-1); }},
      {t1 + ".admission.probability: must be in [0, 1] (0: off), got 1.5",
       [](auto& s) { Table(s, 1).mutable_admission()->set_probability(1.5f); }},
      {t1 + ".admission.probability: must be in [0, 1] (0: off), got -0.5",
       [](auto& s) {
         Table(s, 1).mutable_admission()->set_probability(-0.5f);
       }},
      {t1 + ".admission: set at most one of min_count and probability",
       [](auto& s) {
         Table(s, 1).mutable_admission()->set_min_count(3);
         Table(s, 1).mutable_admission()->set_probability(0.5f);
       }},
      {t1 + ".eviction.max_idle_clocks: must be >= 0",
       [](auto& s) {
         Table(s, 1).mutable_eviction()->set_max_idle_clocks(-1);
       }},
      {t1 + ".eviction.max_rows_per_server: must be >= 0",
       [](auto& s) {
         Table(s, 1).mutable_eviction()->set_max_rows_per_server(-5);
       }},
      {t1 + ".eviction.policy: must be LRU or LFU",
       [](auto& s) {
         Table(s, 1).mutable_eviction()->set_policy(
             static_cast<v1::EvictionSpec::Policy>(7));
       }},
      {t1 + ".num_buckets: must be a power of two in [1, 1048576]",
       [](auto& s) { Table(s, 1).set_num_buckets(48); }},
      {t1 + ".num_buckets: must be a power of two in [1, 1048576]",
       [](auto& s) { Table(s, 1).set_num_buckets(1 << 21); }},
      {t1 + ".num_buckets: must be a power of two in [1, 1048576]",
       [](auto& s) { Table(s, 1).set_num_buckets(-64); }},
      {t1 + ".expected_rows: must be in [0, 1099511627776]",
       [](auto& s) { Table(s, 1).set_expected_rows(-1); }},
      {t1 + ".expected_rows: must be in [0, 1099511627776]",
       [](auto& s) { Table(s, 1).set_expected_rows(kMaxExpectedRows + 1); }},
      {t1 + ".num_buckets: the tables would have more than 1048576 buckets",
       [](auto& s) {
         Table(s, 0).set_num_buckets(kMaxBucketsPerTable);
         Table(s, 1).set_num_buckets(1);
       }},
      {"model.sparse_tables: more than 1024 tables",
       [](auto& s) {
         for (int i = 0; i < kMaxSparseTables; ++i) {
           v1::SparseTableSpec* t =
               AddTable(s.mutable_model(), "t" + std::to_string(i), 1);
           t->set_num_buckets(1);
           t->set_expected_rows(1);
         }
       }},
  };
}

// Rules on each table's optimizer.
std::vector<Rule> OptimizerRules() {
  const std::string o = "model.sparse_tables[1].optimizer";
  auto opt = [](v1::JobSpec& s) { return Table(s, 1).mutable_optimizer(); };
  return {
      {o + ": required: set one of sgd, adagrad, rowwise_adagrad, lazy_adam, "
           "ftrl",
       [](auto& s) { Table(s, 1).clear_optimizer(); }},
      {o + ".sgd.learning_rate: must be > 0, got 0",
       [=](auto& s) { opt(s)->mutable_sgd(); }},
      {o + ".sgd.momentum: must be 0 (a sparse table's SGD has no momentum)",
       [=](auto& s) {
         opt(s)->mutable_sgd()->set_learning_rate(0.1f);
         opt(s)->mutable_sgd()->set_momentum(0.9f);
       }},
      {o + ".sgd.weight_decay: must be 0",
       [=](auto& s) {
         opt(s)->mutable_sgd()->set_learning_rate(0.1f);
         opt(s)->mutable_sgd()->set_weight_decay(1e-4f);
       }},
      {o + ".rowwise_adagrad.learning_rate: must be > 0, got -0.1",
       [=](auto& s) {
         opt(s)->mutable_rowwise_adagrad()->set_learning_rate(-0.1f);
       }},
      {o + ".rowwise_adagrad.epsilon: must be > 0, got -1",
       [=](auto& s) { opt(s)->mutable_rowwise_adagrad()->set_epsilon(-1); }},
      {o + ".adagrad.weight_decay: must be >= 0, got -1",
       [=](auto& s) {
         opt(s)->mutable_adagrad()->set_learning_rate(0.1f);
         opt(s)->mutable_adagrad()->set_epsilon(1e-10f);
         opt(s)->mutable_adagrad()->set_weight_decay(-1);
       }},
      {o + ".adagrad.initial_accumulator_value: must be >= 0, got -1",
       [=](auto& s) {
         opt(s)->mutable_adagrad()->set_learning_rate(0.1f);
         opt(s)->mutable_adagrad()->set_epsilon(1e-10f);
         opt(s)->mutable_adagrad()->set_initial_accumulator_value(-1);
       }},
      {o + ".lazy_adam.beta1: must be in [0, 1), got 1",
       [=](auto& s) {
         auto* a = opt(s)->mutable_lazy_adam();
         a->set_learning_rate(0.01f);
         a->set_beta1(1);
       }},
      {o + ".lazy_adam.epsilon: must be > 0, got 0",
       [=](auto& s) {
         auto* a = opt(s)->mutable_lazy_adam();
         a->set_learning_rate(0.01f);
         a->set_beta2(0.99f);
       }},
      {o + ".lazy_adam.weight_decay: must be 0 (lazy Adam has no weight "
           "decay)",
       [=](auto& s) {
         auto* a = opt(s)->mutable_lazy_adam();
         a->set_learning_rate(0.01f);
         a->set_beta2(0.99f);
         a->set_epsilon(1e-8f);
         a->set_weight_decay(0.01f);
       }},
      {o + ".ftrl.alpha: must be > 0, got 0",
       [=](auto& s) { opt(s)->mutable_ftrl()->set_beta(1); }},
      {o + ".ftrl.beta: must be >= 0, got -1",
       [=](auto& s) {
         opt(s)->mutable_ftrl()->set_alpha(0.1f);
         opt(s)->mutable_ftrl()->set_beta(-1);
       }},
      {o + ".ftrl.l1: must be >= 0, got -0.5",
       [=](auto& s) {
         opt(s)->mutable_ftrl()->set_alpha(0.1f);
         opt(s)->mutable_ftrl()->set_l1(-0.5f);
       }},
      {o + ".ftrl.l2: must be >= 0, got -2",
       [=](auto& s) {
         opt(s)->mutable_ftrl()->set_alpha(0.1f);
         opt(s)->mutable_ftrl()->set_l2(-2);
       }},
      {o + ".lazy_adam.learning_rate: must be a finite number",
       [=](auto& s) {
         opt(s)->mutable_lazy_adam()->set_learning_rate(INFINITY);
       }},
  };
}

void ExpectRules(const std::vector<Rule>& rules, const v1::JobSpec& valid) {
  ASSERT_TRUE(ValidateJobSpec(valid).ok()) << ValidateJobSpec(valid);
  for (const Rule& rule : rules) {
    v1::JobSpec spec = valid;
    rule.mutate(spec);
    const absl::Status s = ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << rule.expected;
    EXPECT_THAT(std::string(s.message()), StartsWith(rule.expected));
  }
}

TEST(SparseSpecTest, EachTableRuleNamesTheField) {
  ExpectRules(TableRules(), Defaulted(ExternalSparseSpec()));
}

TEST(SparseSpecTest, EachOptimizerRuleNamesTheField) {
  ExpectRules(OptimizerRules(), Defaulted(ExternalSparseSpec()));
}

TEST(SparseSpecTest, OnlyCtrAndExternalModelsHaveTables) {
  for (auto kind : {v1::ModelSpec::MLP, v1::ModelSpec::SOFTMAX_REGRESSION,
                    v1::ModelSpec::CNN}) {
    v1::JobSpec spec = Defaulted(ExternalSparseSpec());
    spec.mutable_model()->set_kind(kind);
    EXPECT_THAT(
        std::string(ValidateJobSpec(spec).message()),
        StartsWith("model.sparse_tables: only CTR and EXTERNAL models have "
                   "sparse tables"));
  }
  v1::JobSpec spec = Defaulted(CtrSpec());
  spec.mutable_model()->clear_sparse_tables();
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              StartsWith("model.sparse_tables: a CTR model needs at least "
                         "one table"));
}

// The CTR model's data, and what jobs with tables refuse; each rule is
// checked before the model's dense shapes.
std::vector<Rule> CtrRules() {
  return {
      {"dataset.format: a CTR model reads CRITEO data",
       [](auto& s) { s.mutable_dataset()->set_format(v1::DatasetSpec::CSV); }},
      {"model.input_dim: must be 13 for CRITEO data",
       [](auto& s) { s.mutable_model()->set_input_dim(10); }},
      {"model.ctr.num_fields: must be 26 for CRITEO data",
       [](auto& s) { s.mutable_model()->mutable_ctr()->set_num_fields(3); }},
      {"dataset.labels_per_worker: not for CTR models",
       [](auto& s) { s.mutable_dataset()->set_labels_per_worker(1); }},
      {"local_sgd.local_steps: not supported with sparse tables",
       [](auto& s) {
         s.mutable_local_sgd()->set_local_steps(4);
         s.mutable_local_sgd()->mutable_local_optimizer()->set_learning_rate(
             0.1f);
       }},
      {"accumulation_steps: must be 1 (or 0) with sparse tables, got 4",
       [](auto& s) { s.set_accumulation_steps(4); }},
      {"model.sparse_tables[3].optimizer.lazy_adam.weight_decay: must be 0",
       [](auto& s) {
         auto* a = Table(s, 3).mutable_optimizer()->mutable_lazy_adam();
         a->set_learning_rate(0.01f);
         a->set_beta1(0.9f);
         a->set_beta2(0.999f);
         a->set_epsilon(1e-8f);
         a->set_weight_decay(0.1f);
       }},
  };
}

TEST(SparseSpecTest, EachCtrRuleNamesTheField) {
  const v1::JobSpec valid = Defaulted(CtrSpec());
  for (const Rule& rule : CtrRules()) {
    v1::JobSpec spec = valid;
    rule.mutate(spec);
    const absl::Status s = ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << rule.expected;
    EXPECT_THAT(std::string(s.message()), StartsWith(rule.expected));
  }
}

TEST(SparseSpecTest, CriteoDataNeedsACtrModel) {
  v1::JobSpec spec = Defaulted(ExternalSparseSpec());
  spec.mutable_dataset()->set_format(v1::DatasetSpec::CRITEO);
  spec.mutable_dataset()->set_train_file("train.tsv");
  spec.mutable_dataset()->set_test_file("test.tsv");
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              StartsWith("dataset.format: CRITEO data is for a CTR model"));
}

TEST(SparseSpecTest, CriteoDataNeedsItsTwoFiles) {
  v1::JobSpec spec = Defaulted(CtrSpec());
  spec.mutable_dataset()->clear_test_file();
  if (!ModelTensors(spec.model()).ok()) {
    GTEST_SKIP() << "ModelTensors does not know CTR models yet";
  }
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              StartsWith("dataset.test_file: required"));
  spec = Defaulted(CtrSpec());
  spec.mutable_dataset()->set_train_images("images.idx");
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              HasSubstr("only IDX data uses it"));
  spec = Defaulted(CtrSpec());
  spec.mutable_dataset()->set_csv_header(true);
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              StartsWith("dataset.csv_header: only CSV data has a header"));
}

TEST(SparseSpecTest, TheDeployedCtrJobIsTheExampleJob) {
  auto spec =
      JobSpecFromFile(testing::SourcePath("deploy/jobs/criteo-ctr.json"));
  if (absl::IsNotFound(spec.status())) {
    GTEST_SKIP() << spec.status() << " (set PS_SOURCE_DIR)";
  }
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->DebugString(), CtrSpec().DebugString());
  ApplyJobSpecDefaults(&*spec);
  EXPECT_TRUE(ValidateSparseSpec(*spec).ok()) << ValidateSparseSpec(*spec);
}

}  // namespace
}  // namespace ps

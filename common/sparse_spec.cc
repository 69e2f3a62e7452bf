#include "common/sparse_spec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"

namespace ps {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// NaN fails every check below: each is written as "!(valid)".
absl::Status Positive(const std::string& field, float value) {
  if (!(value > 0 && std::isfinite(value))) {
    return Invalid(field, absl::StrCat("must be > 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status NonNegative(const std::string& field, double value) {
  if (!(value >= 0 && std::isfinite(value))) {
    return Invalid(field, absl::StrCat("must be >= 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status UnitInterval(const std::string& field, float value) {
  if (!(value >= 0 && value < 1)) {
    return Invalid(field, absl::StrCat("must be in [0, 1), got ", value));
  }
  return absl::OkStatus();
}

absl::Status Zero(const std::string& field, float value,
                  absl::string_view why) {
  if (value != 0) {
    return Invalid(field, absl::StrCat("must be 0 (", why, "), got ", value));
  }
  return absl::OkStatus();
}

absl::Status ValidateAdagrad(const std::string& at,
                             const v1::AdagradOptions& o) {
  PS_RETURN_IF_ERROR(Positive(at + ".learning_rate", o.learning_rate()));
  PS_RETURN_IF_ERROR(Positive(at + ".epsilon", o.epsilon()));
  PS_RETURN_IF_ERROR(NonNegative(at + ".weight_decay", o.weight_decay()));
  return NonNegative(at + ".initial_accumulator_value",
                     o.initial_accumulator_value());
}

// A table's optimizer (`at` is its path, "model.sparse_tables[i].optimizer").
absl::Status ValidateSparseOptimizer(const std::string& at,
                                     const v1::SparseOptimizerSpec& optimizer) {
  switch (optimizer.kind_case()) {
    case v1::SparseOptimizerSpec::kSgd: {
      const v1::SgdOptions& o = optimizer.sgd();
      PS_RETURN_IF_ERROR(
          Positive(at + ".sgd.learning_rate", o.learning_rate()));
      PS_RETURN_IF_ERROR(Zero(at + ".sgd.momentum", o.momentum(),
                              "a sparse table's SGD has no momentum"));
      return Zero(at + ".sgd.weight_decay", o.weight_decay(),
                  "a sparse table's SGD has no weight decay");
    }
    case v1::SparseOptimizerSpec::kAdagrad:
      return ValidateAdagrad(at + ".adagrad", optimizer.adagrad());
    case v1::SparseOptimizerSpec::kRowwiseAdagrad:
      return ValidateAdagrad(at + ".rowwise_adagrad",
                             optimizer.rowwise_adagrad());
    case v1::SparseOptimizerSpec::kLazyAdam: {
      const v1::AdamOptions& o = optimizer.lazy_adam();
      const std::string p = at + ".lazy_adam";
      PS_RETURN_IF_ERROR(Positive(p + ".learning_rate", o.learning_rate()));
      PS_RETURN_IF_ERROR(UnitInterval(p + ".beta1", o.beta1()));
      PS_RETURN_IF_ERROR(UnitInterval(p + ".beta2", o.beta2()));
      PS_RETURN_IF_ERROR(Positive(p + ".epsilon", o.epsilon()));
      return Zero(p + ".weight_decay", o.weight_decay(),
                  "lazy Adam has no weight decay");
    }
    case v1::SparseOptimizerSpec::kFtrl: {
      const v1::FtrlOptions& o = optimizer.ftrl();
      const std::string p = at + ".ftrl";
      PS_RETURN_IF_ERROR(Positive(p + ".alpha", o.alpha()));
      PS_RETURN_IF_ERROR(NonNegative(p + ".beta", o.beta()));
      PS_RETURN_IF_ERROR(NonNegative(p + ".l1", o.l1()));
      return NonNegative(p + ".l2", o.l2());
    }
    case v1::SparseOptimizerSpec::KIND_NOT_SET:
      break;
  }
  return Invalid(at,
                 "required: set one of sgd, adagrad, rowwise_adagrad, "
                 "lazy_adam, ftrl");
}

// 1 to kMaxSparseTableNameBytes of printable ASCII without spaces.
absl::Status ValidateTableName(const std::string& at, const std::string& name) {
  if (name.empty()) return Invalid(at, "required");
  if (name.size() > kMaxSparseTableNameBytes) {
    return Invalid(
        at, absl::StrCat("longer than ", kMaxSparseTableNameBytes, " bytes"));
  }
  for (char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) {
      return Invalid(at, "may hold only printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateInit(const std::string& at, const v1::SparseInit& init) {
  switch (init.kind()) {
    case v1::SparseInit::UNIFORM:
    case v1::SparseInit::NORMAL:
      return NonNegative(at + ".scale", init.scale());
    case v1::SparseInit::ZEROS:
      return Zero(at + ".scale", init.scale(), "ZEROS takes no scale");
    default:
      return Invalid(at + ".kind", "must be UNIFORM, NORMAL or ZEROS");
  }
}

absl::Status ValidateAdmission(const std::string& at,
                               const v1::AdmissionSpec& admission) {
  if (admission.min_count() < 0) {
    return Invalid(at + ".min_count",
                   absl::StrCat("must be >= 0, got ", admission.min_count()));
  }
  const float p = admission.probability();
  if (!(p >= 0 && p <= 1)) {
    return Invalid(at + ".probability",
                   absl::StrCat("must be in [0, 1] (0: off), got ", p));
  }
  if (admission.min_count() != 0 && p != 0) {
    return Invalid(at, "set at most one of min_count and probability");
  }
  return absl::OkStatus();
}

absl::Status ValidateEviction(const std::string& at,
                              const v1::EvictionSpec& eviction) {
  if (eviction.max_idle_clocks() < 0) {
    return Invalid(at + ".max_idle_clocks",
                   absl::StrCat("must be >= 0 (0: never), got ",
                                eviction.max_idle_clocks()));
  }
  if (eviction.max_rows_per_server() < 0) {
    return Invalid(at + ".max_rows_per_server",
                   absl::StrCat("must be >= 0 (0: unbounded), got ",
                                eviction.max_rows_per_server()));
  }
  switch (eviction.policy()) {
    case v1::EvictionSpec::POLICY_UNSPECIFIED:
    case v1::EvictionSpec::LRU:
    case v1::EvictionSpec::LFU:
      return absl::OkStatus();
    default:
      return Invalid(at + ".policy", "must be LRU or LFU");
  }
}

// One table, model.sparse_tables[i] (after defaults).
absl::Status ValidateTable(int i, const v1::SparseTableSpec& table) {
  const std::string at = absl::StrCat("model.sparse_tables[", i, "]");
  PS_RETURN_IF_ERROR(ValidateTableName(at + ".name", table.name()));
  if (table.dim() < 1 || table.dim() > kMaxSparseDim) {
    return Invalid(at + ".dim", absl::StrCat("must be in [1, ", kMaxSparseDim,
                                             "], got ", table.dim()));
  }
  PS_RETURN_IF_ERROR(ValidateInit(at + ".init", table.init()));
  PS_RETURN_IF_ERROR(
      ValidateSparseOptimizer(at + ".optimizer", table.optimizer()));
  PS_RETURN_IF_ERROR(ValidateAdmission(at + ".admission", table.admission()));
  PS_RETURN_IF_ERROR(ValidateEviction(at + ".eviction", table.eviction()));
  const int32_t buckets = table.num_buckets();
  if (buckets < 1 || buckets > kMaxBucketsPerTable ||
      !std::has_single_bit(static_cast<uint32_t>(buckets))) {
    return Invalid(
        at + ".num_buckets",
        absl::StrCat("must be a power of two in [1, ", kMaxBucketsPerTable,
                     "] (0: ", kDefaultBucketsPerServer, " per server), got ",
                     buckets));
  }
  if (table.expected_rows() < 0 || table.expected_rows() > kMaxExpectedRows) {
    return Invalid(at + ".expected_rows",
                   absl::StrCat("must be in [0, ", kMaxExpectedRows,
                                "] (0: ", kDefaultExpectedRows, "), got ",
                                table.expected_rows()));
  }
  return absl::OkStatus();
}

// Which models hold tables, and the tables themselves.
absl::Status ValidateTables(const v1::ModelSpec& model) {
  const int n = model.sparse_tables_size();
  switch (model.kind()) {
    case v1::ModelSpec::CTR:
      if (n == 0) {
        return Invalid("model.sparse_tables",
                       "a CTR model needs at least one table");
      }
      break;
    case v1::ModelSpec::EXTERNAL:
      break;
    default:
      if (n > 0) {
        return Invalid("model.sparse_tables",
                       "only CTR and EXTERNAL models have sparse tables");
      }
      return absl::OkStatus();
  }
  if (n > kMaxSparseTables) {
    return Invalid("model.sparse_tables",
                   absl::StrCat("more than ", kMaxSparseTables, " tables"));
  }
  absl::flat_hash_set<absl::string_view> names;
  int64_t buckets = 0;
  for (int i = 0; i < n; ++i) {
    const v1::SparseTableSpec& table = model.sparse_tables(i);
    PS_RETURN_IF_ERROR(ValidateTable(i, table));
    if (!names.insert(table.name()).second) {
      return Invalid(
          absl::StrCat("model.sparse_tables[", i, "].name"),
          absl::StrCat("\"", table.name(), "\" names an earlier table too"));
    }
    buckets += table.num_buckets();
    if (buckets > kMaxBucketsPerJob) {
      return Invalid(
          absl::StrCat("model.sparse_tables[", i, "].num_buckets"),
          absl::StrCat("the tables would have more than ", kMaxBucketsPerJob,
                       " buckets in all (the shard map lists each); use "
                       "fewer"));
    }
  }
  return absl::OkStatus();
}

// A CTR model and CRITEO data go together; the format fixes the features.
absl::Status ValidateCtrData(const v1::JobSpec& spec) {
  const bool ctr = spec.model().kind() == v1::ModelSpec::CTR;
  const bool criteo = spec.dataset().format() == v1::DatasetSpec::CRITEO;
  if (criteo && !ctr) {
    return Invalid("dataset.format", "CRITEO data is for a CTR model");
  }
  if (!ctr) return absl::OkStatus();
  if (!criteo) {
    return Invalid("dataset.format", "a CTR model reads CRITEO data");
  }
  if (spec.model().input_dim() != kCriteoDenseFeatures) {
    return Invalid("model.input_dim",
                   absl::StrCat("must be ", kCriteoDenseFeatures,
                                " for CRITEO data (its integer features), got ",
                                spec.model().input_dim()));
  }
  if (spec.model().ctr().num_fields() != kCriteoFields) {
    return Invalid(
        "model.ctr.num_fields",
        absl::StrCat("must be ", kCriteoFields,
                     " for CRITEO data (its categorical features), got ",
                     spec.model().ctr().num_fields()));
  }
  if (spec.dataset().labels_per_worker() != 0) {
    return Invalid("dataset.labels_per_worker",
                   "not for CTR models (a worker with one label would see "
                   "only clicks or only non-clicks)");
  }
  return absl::OkStatus();
}

// What the workers do not (yet) do with sparse tables.
absl::Status ValidateSparseTraining(const v1::JobSpec& spec) {
  if (spec.model().sparse_tables_size() == 0) return absl::OkStatus();
  if (spec.local_sgd().local_steps() != 0) {
    return Invalid("local_sgd.local_steps",
                   "not supported with sparse tables (a round's change of "
                   "the rows a worker touched is not defined by local "
                   "steps on its own copy)");
  }
  if (spec.accumulation_steps() > 1) {
    return Invalid(
        "accumulation_steps",
        absl::StrCat("must be 1 (or 0) with sparse tables, got ",
                     spec.accumulation_steps(),
                     ": a push carries one batch's rows; use a larger "
                     "batch_size (a CTR sample is small)"));
  }
  return absl::OkStatus();
}

// The optimizer's documented defaults (SparseOptimizerSpec).
void ApplySparseOptimizerDefaults(v1::SparseOptimizerSpec* optimizer) {
  switch (optimizer->kind_case()) {
    case v1::SparseOptimizerSpec::kAdagrad:
    case v1::SparseOptimizerSpec::kRowwiseAdagrad: {
      v1::AdagradOptions* o = optimizer->has_adagrad()
                                  ? optimizer->mutable_adagrad()
                                  : optimizer->mutable_rowwise_adagrad();
      if (o->epsilon() == 0) o->set_epsilon(1e-10f);
      break;
    }
    case v1::SparseOptimizerSpec::kLazyAdam: {
      v1::AdamOptions* o = optimizer->mutable_lazy_adam();
      if (o->beta1() == 0) o->set_beta1(0.9f);
      if (o->beta2() == 0) o->set_beta2(0.999f);
      if (o->epsilon() == 0) o->set_epsilon(1e-8f);
      break;
    }
    case v1::SparseOptimizerSpec::kFtrl:
      if (optimizer->ftrl().beta() == 0) optimizer->mutable_ftrl()->set_beta(1);
      break;
    default:
      break;
  }
}

}  // namespace

int32_t DefaultNumBuckets(int num_servers, int num_tables) {
  const int64_t servers =
      std::clamp<int64_t>(num_servers, 1, int64_t{kMaxNodesPerJob});
  const uint64_t wanted =
      std::bit_ceil(static_cast<uint64_t>(servers * kDefaultBucketsPerServer));
  const uint64_t per_job = std::bit_floor(static_cast<uint64_t>(
      kMaxDefaultBucketsPerJob / std::clamp(num_tables, 1, kMaxSparseTables)));
  return static_cast<int32_t>(std::min<uint64_t>(
      {wanted, static_cast<uint64_t>(kMaxBucketsPerTable), per_job}));
}

int64_t SparseStateFloatsPerRow(const v1::SparseTableSpec& table) {
  const int64_t dim = table.dim();
  switch (table.optimizer().kind_case()) {
    case v1::SparseOptimizerSpec::kAdagrad:
      return dim;
    case v1::SparseOptimizerSpec::kRowwiseAdagrad:
      return 1;
    case v1::SparseOptimizerSpec::kLazyAdam:
      return 2 * dim + 1;
    case v1::SparseOptimizerSpec::kFtrl:
      return 2 * dim;
    default:  // SGD, or none.
      return 0;
  }
}

int64_t BucketLoad(const v1::SparseTableSpec& table) {
  if (table.num_buckets() < 1) return 0;
  const int64_t rows = std::clamp<int64_t>(
      table.expected_rows() == 0 ? kDefaultExpectedRows : table.expected_rows(),
      0, kMaxExpectedRows);
  const int64_t per_bucket =
      (rows + table.num_buckets() - 1) / table.num_buckets();
  const int64_t floats = std::clamp<int64_t>(table.dim(), 0, kMaxSparseDim) +
                         SparseStateFloatsPerRow(table);
  return per_bucket * std::max<int64_t>(floats, 0);
}

void ApplySparseDefaults(v1::JobSpec* spec) {
  if (!spec->has_model()) return;
  v1::ModelSpec* model = spec->mutable_model();
  const int n = model->sparse_tables_size();
  for (v1::SparseTableSpec& table : *model->mutable_sparse_tables()) {
    if (table.num_buckets() == 0) {
      table.set_num_buckets(DefaultNumBuckets(spec->num_servers(), n));
    }
    if (table.expected_rows() == 0) {
      table.set_expected_rows(kDefaultExpectedRows);
    }
    v1::SparseInit* init = table.mutable_init();
    if (init->kind() == v1::SparseInit::KIND_UNSPECIFIED) {
      init->set_kind(v1::SparseInit::UNIFORM);
    }
    if (init->scale() == 0 && init->kind() == v1::SparseInit::UNIFORM &&
        table.dim() >= 1) {
      init->set_scale(1.0f / std::sqrt(static_cast<float>(table.dim())));
    }
    if (init->scale() == 0 && init->kind() == v1::SparseInit::NORMAL) {
      init->set_scale(0.01f);
    }
    if (table.has_optimizer()) {
      ApplySparseOptimizerDefaults(table.mutable_optimizer());
    }
    if (table.eviction().max_rows_per_server() > 0 &&
        table.eviction().policy() == v1::EvictionSpec::POLICY_UNSPECIFIED) {
      table.mutable_eviction()->set_policy(v1::EvictionSpec::LRU);
    }
  }
}

absl::Status ValidateSparseSpec(const v1::JobSpec& spec) {
  PS_RETURN_IF_ERROR(ValidateTables(spec.model()));
  PS_RETURN_IF_ERROR(ValidateCtrData(spec));
  return ValidateSparseTraining(spec);
}

}  // namespace ps

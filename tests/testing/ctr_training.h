// Training a CTR job (docs/sparse.md) on in-process parameter servers, for
// the integration tests of sparse tables: a job spec on Criteo-format files,
// small synthetic Criteo data, Trainers run in threads, a worker's step driven
// by hand (as Trainer's CTR path takes it), and the trained model read back
// (dense tensors and rows) and evaluated. Failures are test failures.
#ifndef PS_TESTS_TESTING_CTR_TRAINING_H_
#define PS_TESTS_TESTING_CTR_TRAINING_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/binary_metrics.h"
#include "common/criteo_reader.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "coordinator/shard_planner.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/parameter_server.h"
#include "tests/testing/run_trainers.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/ctr_model.h"
#include "worker/parameter_client.h"
#include "worker/sparse_router.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace ps::testing {

// What CtrJob builds. The defaults are a small DLRM: 26 tables (one per
// Criteo field) of dim 8, bottom MLP [16, 8], DOT, top MLP [16].
struct CtrJobOptions {
  std::string train_file;
  std::string test_file;
  int dim = 8;
  // Every table's optimizer. Default: row-wise Adagrad, rate 0.05.
  v1::SparseOptimizerSpec table_optimizer = [] {
    v1::SparseOptimizerSpec o;
    o.mutable_rowwise_adagrad()->set_learning_rate(0.05f);
    return o;
  }();
  // The dense tensors' optimizer. Default: Adagrad, rate 0.05.
  v1::OptimizerSpec optimizer = [] {
    v1::OptimizerSpec o;
    o.mutable_adagrad()->set_learning_rate(0.05f);
    return o;
  }();
  int batch_size = 256;
  int epochs = 1;
  int num_workers = 2;
  int num_servers = 2;
  uint64_t seed = 7;
};

// A BSP job (WAL durability) of a CTR model on the Criteo files of
// `options`, defaults applied and validated (checked).
inline v1::JobSpec CtrJob(const CtrJobOptions& options) {
  v1::JobSpec spec;
  spec.set_name("ctr-test");
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::CTR);
  model->set_input_dim(kCriteoDenseFeatures);
  model->set_num_classes(2);
  for (int f = 0; f < kCriteoFields; ++f) {
    v1::SparseTableSpec* table = model->add_sparse_tables();
    table->set_name(absl::StrCat("C", f + 1));
    table->set_dim(options.dim);
    *table->mutable_optimizer() = options.table_optimizer;
  }
  v1::CtrModelSpec* ctr = model->mutable_ctr();
  ctr->set_num_fields(kCriteoFields);
  ctr->add_bottom_mlp(16);
  ctr->add_bottom_mlp(options.dim);
  ctr->add_top_mlp(16);
  v1::DatasetSpec* data = spec.mutable_dataset();
  data->set_format(v1::DatasetSpec::CRITEO);
  data->set_train_file(options.train_file);
  data->set_test_file(options.test_file);
  spec.set_epochs(options.epochs);
  spec.set_batch_size(options.batch_size);
  spec.set_seed(options.seed);
  *spec.mutable_optimizer() = options.optimizer;
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::BSP);
  spec.set_num_workers(options.num_workers);
  spec.set_num_servers(options.num_servers);
  spec.set_durability(v1::WAL);
  ApplyJobSpecDefaults(&spec);
  const absl::Status valid = ValidateJobSpec(spec);
  PS_CHECK(valid.ok(), valid.ToString());
  return spec;
}

// `rows` lines of Criteo text (docs/sparse.md, "The format"), a pure
// function of `seed`: field f draws one of 2 + 3 * (f % 8) values (a few
// missing), the integers are small (some negative or missing), and the label
// is drawn from a logistic model of per-value weights, so it can be learnt.
inline std::vector<std::string> SyntheticCriteoLines(int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&rng] {
    return static_cast<double>(rng() >> 11) * 0x1.0p-53;
  };
  std::vector<std::string> lines;
  lines.reserve(rows);
  for (int i = 0; i < rows; ++i) {
    std::string features;
    double z = -1.0;
    for (int j = 0; j < kCriteoDenseFeatures; ++j) {
      if (uniform() < 0.05) {
        features += "\t";  // Missing.
        continue;
      }
      const int64_t x = static_cast<int64_t>(rng() % 50) - (j == 1 ? 3 : 0);
      z += 0.02 * (j % 3 - 1) * static_cast<double>(std::max<int64_t>(x, 0));
      absl::StrAppend(&features, "\t", x);
    }
    for (int f = 0; f < kCriteoFields; ++f) {
      if (uniform() < 0.02) {
        features += "\t";  // Missing.
        continue;
      }
      const uint32_t slot = static_cast<uint32_t>(rng() % (2 + 3 * (f % 8)));
      const uint32_t value = (slot + 1) * 0x9e3779b1u ^ (f * 0x85ebca6bu);
      // The value's weight: a fixed function of (field, slot).
      z += 0.6 * std::sin(1.7 * slot + 0.9 * f);
      absl::StrAppend(&features, "\t", absl::StrFormat("%08x", value));
    }
    const int label = uniform() < 1.0 / (1.0 + std::exp(-z)) ? 1 : 0;
    lines.push_back(absl::StrCat(label, features, "\n"));
  }
  return lines;
}

// Writes `lines` to `path` (checked).
inline void WriteLines(const std::string& path,
                       const std::vector<std::string>& lines) {
  FILE* f = std::fopen(path.c_str(), "w");
  PS_CHECK(f != nullptr, "cannot write ", path);
  for (const std::string& line : lines) {
    PS_CHECK(std::fwrite(line.data(), 1, line.size(), f) == line.size());
  }
  PS_CHECK(std::fclose(f) == 0);
}

// Parameter servers on loopback, each, given a data directory, with a
// RocksDB store in a directory of its own; jobs are assigned directly, as the
// coordinator would. Not thread-safe.
class CtrServers {
 public:
  // `data_dir` empty: memory stores.
  CtrServers(int num_servers, const std::string& data_dir) {
    for (int i = 0; i < num_servers; ++i) {
      ParameterServerOptions options;
      if (!data_dir.empty()) options.data_dir = absl::StrCat(data_dir, "/s", i);
      servers_.push_back(std::make_unique<ParameterServer>(options));
      const absl::Status started = servers_.back()->Start();
      PS_CHECK(started.ok(), started.ToString());
      // A restart listens where the first start did.
      options.listen_address = servers_.back()->address();
      options_.push_back(options);
    }
  }
  ~CtrServers() {
    for (auto& s : servers_) s->Stop();
  }

  // Assigns `spec` (complete) to every server as job `job_id`, with a shard
  // map from PlanShards (dense blocks and every table's buckets); returns
  // worker 0's assignment.
  v1::Assignment Assign(const v1::JobSpec& spec, const std::string& job_id) {
    std::vector<std::string> addresses;
    for (auto& s : servers_) addresses.push_back(s->address());
    auto map = PlanShards(spec, addresses, 1);
    PS_CHECK(map.ok(), map.status().ToString());
    v1::Assignment a;
    a.set_job_id(job_id);
    *a.mutable_spec() = spec;
    *a.mutable_shard_map() = *map;
    a.set_num_workers(spec.num_workers());
    assigned_.push_back(a);
    for (size_t i = 0; i < servers_.size(); ++i) LoadAll(i);
    a.set_index(0);
    return a;
  }

  ParameterServer& server(int i) { return *servers_[i]; }
  const std::string& data_dir(int i) const { return options_[i].data_dir; }

  // Stops server i (cleanly: its jobs write a snapshot) and starts it again
  // on its address from the store in `data_dir` (its own if empty), with
  // every job assigned so far.
  void Restart(int i, const std::string& data_dir = "") {
    servers_[i]->Stop();
    if (!data_dir.empty()) options_[i].data_dir = data_dir;
    servers_[i] = std::make_unique<ParameterServer>(options_[i]);
    const absl::Status started = servers_[i]->Start();
    PS_CHECK(started.ok(), started.ToString());
    LoadAll(i);
  }

 private:
  // Gives server i every job assigned so far (SyncAssignments unloads any
  // job it is not given).
  void LoadAll(size_t i) {
    std::vector<v1::Assignment> mine = assigned_;
    for (v1::Assignment& a : mine) a.set_index(static_cast<int>(i));
    const std::vector<absl::Status> failed =
        servers_[i]->manager()->SyncAssignments(mine);
    PS_CHECK(failed.empty(), failed.front().ToString());
  }

  std::vector<ParameterServerOptions> options_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<v1::Assignment> assigned_;
};

// A batch of a CTR data set with its storage.
struct OwnedCtrBatch {
  std::vector<float> dense;
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;

  CtrBatch view() const {
    return {.batch = static_cast<int>(labels.size()),
            .dense = dense.data(),
            .ids = ids.data(),
            .labels = labels.data()};
  }
};

// The samples `order` names, in that order.
inline OwnedCtrBatch GatherCtrSamples(const CtrDataset& data,
                                      std::span<const int64_t> order) {
  OwnedCtrBatch b;
  const size_t nd = data.num_dense, nf = data.num_fields;
  for (int64_t at : order) {
    b.dense.insert(b.dense.end(), data.dense.begin() + at * nd,
                   data.dense.begin() + (at + 1) * nd);
    b.ids.insert(b.ids.end(), data.ids.begin() + at * nf,
                 data.ids.begin() + (at + 1) * nf);
    b.labels.push_back(data.labels[at]);
  }
  return b;
}

// Per table (field f reads table f): the distinct ids of `data`, ascending.
inline std::vector<std::vector<uint64_t>> DistinctIds(const CtrDataset& data) {
  std::vector<std::vector<uint64_t>> ids(data.num_fields);
  for (int f = 0; f < data.num_fields; ++f) {
    absl::flat_hash_set<uint64_t> seen;
    for (int64_t i = 0; i < data.size(); ++i) {
      seen.insert(data.ids[i * data.num_fields + f]);
    }
    ids[f].assign(seen.begin(), seen.end());
    std::sort(ids[f].begin(), ids[f].end());
  }
  return ids;
}

// One worker of a CTR job, its steps driven by hand as Trainer::RunCtrStep
// takes them: Prepare, PullStep of the batch's unique ids, SetParameters,
// ComputeGradients, PushStep. Not thread-safe (one thread per worker).
class CtrTestWorker {
 public:
  // Worker `index` of `assignment` (checked).
  CtrTestWorker(v1::Assignment assignment, int index)
      : backend_(CpuBackend::Create({.num_threads = 1})) {
    assignment.set_index(index);
    spec_ = assignment.spec();
    auto model = CtrModel::Create(spec_.model(), backend_.get());
    PS_CHECK(model.ok(), model.status().ToString());
    model_ = *std::move(model);
    auto client = ParameterClient::Create(assignment, model_->tensors(),
                                          ParameterClientOptions(), nullptr);
    PS_CHECK(client.ok(), client.status().ToString());
    client_ = *std::move(client);
  }

  // One step at `clock` on `batch`; returns the loss. After it, step() holds
  // the batch's unique ids, the rows pulled and their gradients, params()
  // the dense tensors pulled and grads() their gradients.
  absl::StatusOr<float> Step(int64_t clock, const CtrBatch& batch) {
    PullIdsOf(batch);
    absl::Status s =
        client_->PullStep(clock, /*final=*/false, &params_, &step_);
    if (!s.ok()) return s;
    s = model_->SetParameters(params_);
    if (!s.ok()) return s;
    absl::StatusOr<float> loss =
        model_->ComputeGradients(batch, step_.rows, &grads_, &step_.row_grads);
    if (!loss.ok()) return loss;
    s = client_->PushStep(clock, grads_, step_);
    if (!s.ok()) return s;
    return loss;
  }

  // The click probabilities of `data` under the model that holds every
  // update of clocks below `clock` (a final pull), in chunks of a batch.
  absl::StatusOr<std::vector<float>> Predict(const CtrDataset& data,
                                             int64_t clock) {
    std::vector<float> out(data.size());
    const int64_t chunk = std::max(1, spec_.batch_size());
    std::vector<int64_t> order;
    for (int64_t first = 0; first < data.size(); first += chunk) {
      order.clear();
      for (int64_t i = first; i < std::min(data.size(), first + chunk); ++i) {
        order.push_back(i);
      }
      const OwnedCtrBatch owned = GatherCtrSamples(data, order);
      const CtrBatch batch = owned.view();
      PullIdsOf(batch);
      absl::Status s =
          client_->PullStep(clock, /*final=*/true, &params_, &step_);
      if (!s.ok()) return s;
      s = model_->SetParameters(params_);
      if (!s.ok()) return s;
      s = model_->Predict(batch, step_.rows, out.data() + first);
      if (!s.ok()) return s;
    }
    return out;
  }

  // The dense tensors and the rows of `ids` (per table) as of a final pull
  // at `clock`, in pulls of at most a batch's ids.
  absl::Status PullModel(int64_t clock,
                         const std::vector<std::vector<uint64_t>>& ids,
                         std::vector<std::vector<float>>* params,
                         std::vector<std::vector<float>>* rows) {
    SparseStep part;  // No ids: the dense tensors only.
    absl::Status s = client_->PullStep(clock, /*final=*/true, params, &part);
    if (!s.ok()) return s;
    const size_t max_ids = static_cast<size_t>(spec_.batch_size()) *
                           spec_.model().ctr().num_fields();
    rows->assign(ids.size(), {});
    std::vector<std::vector<float>> scratch;
    for (size_t t = 0; t < ids.size(); ++t) {
      for (size_t first = 0; first < ids[t].size(); first += max_ids) {
        const size_t n = std::min(max_ids, ids[t].size() - first);
        part.ids.assign(t + 1, {});
        part.ids[t].assign(ids[t].begin() + first, ids[t].begin() + first + n);
        s = client_->PullStep(clock, /*final=*/true, &scratch, &part);
        if (!s.ok()) return s;
        (*rows)[t].insert((*rows)[t].end(), part.rows[t].begin(),
                          part.rows[t].end());
      }
    }
    return absl::OkStatus();
  }

  const SparseStep& step() const { return step_; }
  const std::vector<std::vector<float>>& params() const { return params_; }
  const std::vector<std::vector<float>>& grads() const { return grads_; }
  CtrModel& model() { return *model_; }
  ParameterClient& client() { return *client_; }

 private:
  // Prepare's unique ids of `batch` into step_.ids.
  void PullIdsOf(const CtrBatch& batch) {
    const SparseBatch& sparse = model_->Prepare(batch);
    step_.ids.resize(model_->num_tables());
    for (int t = 0; t < model_->num_tables(); ++t) {
      step_.ids[t].assign(sparse.unique_ids(t).begin(),
                          sparse.unique_ids(t).end());
    }
  }

  v1::JobSpec spec_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<CtrModel> model_;
  std::unique_ptr<ParameterClient> client_;
  SparseStep step_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> grads_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_CTR_TRAINING_H_

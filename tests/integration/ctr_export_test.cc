// Checkpoint portability (docs/model-format.md): a CTR job trained on two
// parameter servers is exported with its sparse rows (ParameterService.
// ReadRows, page by page, into a PSMODEL2 file), and a job started from that
// file (JobSpec.init_from) on three servers, whose tables have twice the
// buckets, predicts the test split bit for bit as the trained job does, also
// after a server of the new job restarts from a crash image of its store.
// The rows read the same from a loaded job and from an ended one's store; a
// file that does not fit the new job is refused, naming the mismatch.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/table_export.h"
#include "common/criteo_reader.h"
#include "common/float_codec.h"
#include "common/model_file.h"
#include "common/model_layout.h"
#include "common/model_tables.h"
#include "coordinator/shard_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/ctr_training.h"
#include "tests/testing/scoped_temp_dir.h"

namespace ps {
namespace {

using testing::CtrJob;
using testing::CtrJobOptions;
using testing::CtrServers;
using testing::CtrTestWorker;
using ::testing::HasSubstr;

constexpr int kTrainRows = 2048, kTestRows = 512, kBatch = 128;
constexpr int64_t kClocks = kTrainRows / (2 * kBatch);  // 1 epoch, 2 workers.

class CtrExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteLines(Path("train.tsv"),
                        testing::SyntheticCriteoLines(kTrainRows, 5));
    testing::WriteLines(Path("test.tsv"),
                        testing::SyntheticCriteoLines(kTestRows, 6));
  }
  std::string Path(const std::string& name) const { return dir_.File(name); }

  // The trained model as worker 0 uploads it: the dense tensors of a final
  // pull, named and shaped as ModelTensors says.
  static v1::TrainedModel DenseModel(const v1::Assignment& a, int64_t clock) {
    CtrTestWorker reader(a, 0);
    std::vector<std::vector<float>> params, rows;
    const absl::Status pulled = reader.PullModel(clock, {}, &params, &rows);
    EXPECT_TRUE(pulled.ok()) << pulled;
    v1::TrainedModel model;
    model.set_job_id(a.job_id());
    *model.mutable_model() = a.spec().model();
    model.set_clock(clock);
    auto tensors = ModelTensors(a.spec().model());
    EXPECT_TRUE(tensors.ok());
    for (size_t i = 0; i < tensors->size() && i < params.size(); ++i) {
      v1::Tensor* t = model.add_tensors();
      t->set_name((*tensors)[i].name);
      for (int64_t d : (*tensors)[i].shape) t->add_shape(d);
      EncodeFloats(params[i], t->mutable_data());
    }
    return model;
  }

  // The assignment `servers` would get for `spec`, without loading it.
  static v1::Assignment AssignmentFor(const v1::JobSpec& spec,
                                      CtrServers& servers, int n,
                                      const std::string& job_id) {
    std::vector<std::string> addresses;
    for (int i = 0; i < n; ++i)
      addresses.push_back(servers.server(i).address());
    auto map = PlanShards(spec, addresses, 1);
    EXPECT_TRUE(map.ok()) << map.status();
    v1::Assignment a;
    a.set_job_id(job_id);
    *a.mutable_spec() = spec;
    *a.mutable_shard_map() = *map;
    a.set_num_workers(spec.num_workers());
    return a;
  }

  testing::ScopedTempDir dir_{"ps-ctr-export"};
};

// Per table, (id, row) pairs sorted by id.
using SortedRows = std::vector<std::vector<std::pair<uint64_t, std::string>>>;
SortedRows Sorted(const std::vector<ModelTableRows>& tables, int dim) {
  SortedRows out(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    for (size_t i = 0; i < tables[t].ids.size(); ++i) {
      out[t].emplace_back(
          tables[t].ids[i],
          std::string(reinterpret_cast<const char*>(&tables[t].values[i * dim]),
                      dim * sizeof(float)));
    }
    std::sort(out[t].begin(), out[t].end());
  }
  return out;
}

// The new job's spec: the trained one's, on `servers` servers, its layout
// (block size, buckets) derived for them anew, started from `path`.
v1::JobSpec Restarted(v1::JobSpec spec, int servers, const std::string& path) {
  spec.set_num_servers(servers);
  spec.set_block_elems(0);
  for (auto& t : *spec.mutable_model()->mutable_sparse_tables()) {
    t.set_num_buckets(0);
  }
  spec.set_init_from(path);
  ApplyJobSpecDefaults(&spec);
  const absl::Status valid = ValidateJobSpec(spec);
  EXPECT_TRUE(valid.ok()) << valid;
  return spec;
}

TEST_F(CtrExportTest, AJobStartedFromAnExportPredictsBitForBit) {
  CtrJobOptions options{.train_file = Path("train.tsv"),
                        .test_file = Path("test.tsv"),
                        .batch_size = kBatch};
  const v1::JobSpec spec = CtrJob(options);
  auto test = ReadCriteoFile(Path("test.tsv"));
  ASSERT_TRUE(test.ok()) << test.status();

  CtrServers trained_servers(2, Path("trained"));
  const v1::Assignment trained = trained_servers.Assign(spec, "job-000001");
  for (const absl::Status& s : testing::RunTrainers(trained)) {
    ASSERT_TRUE(s.ok()) << s;
  }
  auto expected = CtrTestWorker(trained, 0).Predict(*test, kClocks);
  ASSERT_TRUE(expected.ok()) << expected.status();

  // Export while the servers still serve the job, in small pages.
  const v1::TrainedModel dense = DenseModel(trained, kClocks);
  TableExportOptions export_options;
  export_options.page_bytes = 4096;
  auto rows = ExportModelWithTables(dense, trained.shard_map(),
                                    Path("model.bin"), export_options);
  ASSERT_TRUE(rows.ok()) << rows.status();
  auto tables = ReadAllModelTables(Path("model.bin"));
  ASSERT_TRUE(tables.ok()) << tables.status();
  // Every id trained has its row (admission is unconditional, nothing is
  // evicted), once, with the bits a pull reads.
  auto train = ReadCriteoFile(Path("train.tsv"));
  ASSERT_TRUE(train.ok()) << train.status();
  const std::vector<std::vector<uint64_t>> ids = testing::DistinctIds(*train);
  const SortedRows exported = Sorted(*tables, options.dim);
  int64_t distinct = 0;
  std::vector<std::vector<uint64_t>> exported_ids(exported.size());
  for (size_t t = 0; t < exported.size(); ++t) {
    for (const auto& [id, row] : exported[t]) exported_ids[t].push_back(id);
    distinct += static_cast<int64_t>(ids[t].size());
  }
  EXPECT_EQ(exported_ids, ids);
  EXPECT_EQ(*rows, distinct);
  std::vector<std::vector<float>> params, pulled;
  ASSERT_TRUE(
      CtrTestWorker(trained, 0).PullModel(kClocks, ids, &params, &pulled).ok());
  for (size_t t = 0; t < ids.size(); ++t) {
    for (size_t i = 0; i < ids[t].size(); ++i) {
      ASSERT_EQ(
          std::memcmp(exported[t][i].second.data(), &pulled[t][i * options.dim],
                      options.dim * sizeof(float)),
          0)
          << "table " << t << " id " << ids[t][i];
    }
  }

  // Once the job has ended (unloaded: a last snapshot), the same rows come
  // from the servers' stores.
  for (int s = 0; s < 2; ++s) {
    EXPECT_TRUE(
        trained_servers.server(s).manager()->SyncAssignments({}).empty());
  }
  auto again = ExportModelWithTables(dense, trained.shard_map(),
                                     Path("model-ended.bin"), {});
  ASSERT_TRUE(again.ok()) << again.status();
  auto ended_tables = ReadAllModelTables(Path("model-ended.bin"));
  ASSERT_TRUE(ended_tables.ok()) << ended_tables.status();
  EXPECT_EQ(Sorted(*ended_tables, options.dim), Sorted(*tables, options.dim));

  // A new job on three servers (256 buckets per table, not 128).
  const v1::JobSpec restarted = Restarted(spec, 3, Path("model.bin"));
  ASSERT_EQ(restarted.model().sparse_tables(0).num_buckets(), 256);
  CtrServers new_servers(3, Path("restored"));
  const v1::Assignment restored = new_servers.Assign(restarted, "job-000002");
  auto predicted = CtrTestWorker(restored, 0).Predict(*test, 0);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  ASSERT_EQ(predicted->size(), expected->size());
  EXPECT_EQ(std::memcmp(predicted->data(), expected->data(),
                        expected->size() * sizeof(float)),
            0)
      << "the restored job predicts differently";

  // The loaded rows are durable as trained ones: a crash image of server
  // 2's store, taken right after the load, restores them.
  const std::string crash_image = Path("crash-image");
  std::filesystem::copy(new_servers.data_dir(2), crash_image,
                        std::filesystem::copy_options::recursive);
  new_servers.Restart(2, crash_image);
  auto after_crash = CtrTestWorker(restored, 0).Predict(*test, 0);
  ASSERT_TRUE(after_crash.ok()) << after_crash.status();
  EXPECT_EQ(std::memcmp(after_crash->data(), expected->data(),
                        expected->size() * sizeof(float)),
            0)
      << "the restarted server lost loaded rows";
}

TEST_F(CtrExportTest, AFileThatDoesNotFitTheJobIsRefused) {
  CtrJobOptions options{.train_file = Path("train.tsv"),
                        .test_file = Path("test.tsv"),
                        .batch_size = kBatch,
                        .num_servers = 1};
  const v1::JobSpec spec = CtrJob(options);
  CtrServers servers(1, "");
  const v1::Assignment trained = servers.Assign(spec, "job-000001");
  auto rows = ExportModelWithTables(DenseModel(trained, 0), trained.shard_map(),
                                    Path("model.bin"), {});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 0);  // Nothing trained: no row exists yet.

  const auto open_error = [&](const v1::JobSpec& s) {
    const std::vector<absl::Status> errors =
        servers.server(0).manager()->SyncAssignments(
            {AssignmentFor(s, servers, 1, "job-000002")});
    return errors.empty() ? absl::OkStatus() : errors.front();
  };
  // A table the file does not have.
  v1::JobSpec renamed = Restarted(spec, 1, Path("model.bin"));
  renamed.mutable_model()->mutable_sparse_tables(3)->set_name("D4");
  absl::Status s = open_error(renamed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("init_from: table 3 is C4 of dim 8 in the model "
                        "file, but the job's model.sparse_tables[3] is D4"));
  // Other dims: the tables' and the MLPs' that depend on them.
  CtrJobOptions wide = options;
  wide.dim = 16;
  s = open_error(Restarted(CtrJob(wide), 1, Path("model.bin")));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("init_from: tensor"));
  // No such file.
  s = open_error(Restarted(spec, 1, Path("missing.bin")));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("missing.bin"));
}

}  // namespace
}  // namespace ps

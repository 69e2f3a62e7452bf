// A small job on one server, for tests and fuzz targets that talk to a
// parameter server directly (no coordinator, no data files).
#ifndef PS_TESTS_TESTING_TINY_ASSIGNMENT_H_
#define PS_TESTS_TESTING_TINY_ASSIGNMENT_H_

#include <functional>
#include <string>

#include "common/job_spec.h"
#include "common/model_layout.h"
#include "common/sparse_keys.h"
#include "ps/v1/cluster.pb.h"

namespace ps::testing {

// The spec of softmax regression `input_dim` -> `num_classes` with
// placeholder data file names, 1 epoch, batch 1; the rest is the caller's.
inline v1::JobSpec TinySpec(int input_dim, int num_classes) {
  v1::JobSpec spec;
  spec.mutable_model()->set_kind(v1::ModelSpec::SOFTMAX_REGRESSION);
  spec.mutable_model()->set_input_dim(input_dim);
  spec.mutable_model()->set_num_classes(num_classes);
  v1::DatasetSpec* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::IDX);
  d->set_train_images("a");
  d->set_train_labels("b");
  d->set_test_images("c");
  d->set_test_labels("d");
  spec.set_epochs(1);
  spec.set_batch_size(1);
  return spec;
}

// Worker 0's assignment of job `job_id`: TinySpec(input_dim, num_classes) cut
// into blocks of `block_elems`, every block on `server` (shard map version 1),
// with `num_workers` workers. `customize` sets the rest of the spec
// (optimizer, consistency, ...) before the defaults are applied.
inline v1::Assignment TinyAssignment(
    const std::string& job_id, int input_dim, int num_classes, int block_elems,
    int num_workers, const std::string& server,
    const std::function<void(v1::JobSpec*)>& customize) {
  v1::Assignment a;
  a.set_job_id(job_id);
  v1::JobSpec* spec = a.mutable_spec();
  *spec = TinySpec(input_dim, num_classes);
  spec->set_num_workers(num_workers);
  spec->set_num_servers(1);
  spec->set_block_elems(block_elems);
  customize(spec);
  ApplyJobSpecDefaults(spec);
  a.set_index(0);
  a.set_num_workers(num_workers);
  v1::ShardMap* map = a.mutable_shard_map();
  map->set_version(1);
  map->add_servers(server);
  for (const BlockSpec& b :
       SplitIntoBlocks(*ModelTensors(spec->model()), block_elems)) {
    v1::BlockPlacement* p = map->add_blocks();
    p->set_key(b.key);
    p->set_server(0);
    p->set_num_elems(b.num_elems);
  }
  return a;
}

// The spec of an EXTERNAL model with one dense tensor "w" [3] (zeros) and
// one sparse table "emb" of `dim` floats a row in `num_buckets` buckets, 1
// epoch, batch 1, blocks of 4; the table's optimizer and admission, the
// job's optimizer, consistency and counts are the caller's.
inline v1::JobSpec TinySparseSpec(const std::string& name, int dim,
                                  int num_buckets) {
  v1::JobSpec spec;
  spec.set_name(name);
  v1::ModelSpec* model = spec.mutable_model();
  model->set_kind(v1::ModelSpec::EXTERNAL);
  v1::TensorDecl* w = model->add_tensors();
  w->set_name("w");
  w->add_shape(3);
  w->set_init(v1::ZEROS);
  v1::SparseTableSpec* table = model->add_sparse_tables();
  table->set_name("emb");
  table->set_dim(dim);
  table->set_num_buckets(num_buckets);
  spec.set_epochs(1);
  spec.set_batch_size(1);
  spec.set_block_elems(4);
  return spec;
}

// Places `spec`'s dense blocks (of block_elems) on server 0 of `map` and
// bucket b of its table 0 on `bucket_server(b)`, for every b below
// `num_buckets`.
inline void PlaceTinySparseJob(
    const v1::JobSpec& spec, int num_buckets,
    const std::function<int(uint32_t)>& bucket_server, v1::ShardMap* map) {
  for (const BlockSpec& b :
       SplitIntoBlocks(*ModelTensors(spec.model()), spec.block_elems())) {
    v1::BlockPlacement* p = map->add_blocks();
    p->set_key(b.key);
    p->set_server(0);
    p->set_num_elems(b.num_elems);
  }
  for (uint32_t b = 0; b < static_cast<uint32_t>(num_buckets); ++b) {
    v1::BlockPlacement* p = map->add_blocks();
    p->set_key(BucketKey(0, b));
    p->set_server(bucket_server(b));
    p->set_num_elems(1000);
  }
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_TINY_ASSIGNMENT_H_

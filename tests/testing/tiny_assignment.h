// A small job on one server, for tests and fuzz targets that talk to a
// parameter server directly (no coordinator, no data files).
#ifndef PS_TESTS_TESTING_TINY_ASSIGNMENT_H_
#define PS_TESTS_TESTING_TINY_ASSIGNMENT_H_

#include <functional>
#include <string>

#include "common/job_spec.h"
#include "common/model_layout.h"
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

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_TINY_ASSIGNMENT_H_

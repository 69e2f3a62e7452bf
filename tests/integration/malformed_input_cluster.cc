// The clusters of malformed_input_test.cc: the job, the running job's set-up
// and the order of the refusal cases.
#include "tests/integration/malformed_input_cluster.h"

#include "tests/testing/tiny_assignment.h"
namespace ps {
namespace malformed_input {

v1::JobSpec Spec() {
  v1::JobSpec spec = testing::TinySpec(3, 2);
  spec.set_name("malformed");
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  spec.mutable_consistency()->set_model(v1::ConsistencySpec::SSP);
  spec.set_num_workers(2);
  spec.set_num_servers(1);
  spec.set_block_elems(kBlockElems);
  return spec;
}

v1::Assignment ServerAssignment() {
  v1::Assignment a;
  a.set_job_id(kServerJob);
  *a.mutable_spec() = Spec();
  ApplyJobSpecDefaults(a.mutable_spec());
  a.set_index(0);
  a.set_num_workers(2);
  a.mutable_shard_map()->set_version(1);
  a.mutable_shard_map()->add_servers("127.0.0.1:1");
  for (const auto& [key, n] :
       {std::pair{kW0, 4}, std::pair{kW1, 2}, std::pair{kB0, 2}}) {
    auto* p = a.mutable_shard_map()->add_blocks();
    p->set_key(key);
    p->set_server(0);
    p->set_num_elems(n);
  }
  return a;
}

void RefusalCluster::StartWithARunningJob() {
  Start();
  if (::testing::Test::HasFatalFailure()) return;
  server_node.set_role(v1::SERVER);
  server_node.set_address("127.0.0.1:9");
  server_node.set_durable(true);  // Spec() is durable (WAL).
  ASSERT_TRUE(Register(server_node).ok());
  worker_node.set_role(v1::WORKER);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(cluster_->Register(&ctx, worker_node, &worker).ok());
  }
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(cluster_->Register(&ctx, worker_node, &stranger).ok());
  }
  v1::JobSpec running_spec = Spec();
  running_spec.set_num_workers(1);
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = running_spec;
  v1::SubmitJobResponse submitted;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(jobs_->SubmitJob(&ctx, submit, &submitted).ok());
  }
  running = submitted.job_id();
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest get;
    get.set_job_id(running);
    v1::JobStatus status;
    ASSERT_TRUE(jobs_->GetJob(&ctx, get, &status).ok());
    ASSERT_EQ(status.state(), v1::RUNNING);
  }
  // The worker that runs it is one of the two registered.
  runner = worker.node_id();
  {
    v1::HeartbeatRequest hb;
    hb.set_node_id(runner);
    grpc::ClientContext ctx;
    v1::HeartbeatResponse response;
    ASSERT_TRUE(cluster_->Heartbeat(&ctx, hb, &response).ok());
    if (response.assignments().empty()) runner = stranger.node_id();
  }
  other = runner == worker.node_id() ? stranger.node_id() : worker.node_id();
}

std::vector<Case> RefusalCluster::Cases() {
  std::vector<Case> cases;
  AddPullCases(cases);
  AddPushCases(cases);
  AddClusterServiceCases(cases);
  AddJobServiceCases(cases);
  AddSizeLimitCases(cases);
  return cases;
}

}  // namespace malformed_input
}  // namespace ps

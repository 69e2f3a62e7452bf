// Refusal cases of ClusterService.
#include "tests/integration/malformed_input_cluster.h"

namespace ps {
namespace malformed_input {

void RefusalCluster::AddClusterServiceCases(std::vector<Case>& cases) {
  using Code = grpc::StatusCode;
  auto add = CaseAdder(cases);
  // ClusterService.
  add(
      "Register", "no cluster secret",
      [&] { return Register(worker_node, outsider_cluster_.get()); },
      Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
  add(
      "Register", "role unspecified", [&] { return Register(bad_role); },
      Code::INVALID_ARGUMENT, "role:");
  for (const std::string& address :
       {std::string(), std::string("host-without-port"), std::string("host:0"),
        std::string("host name:7000"), std::string(300, 'h') + ":1"}) {
    add(
        "Register",
        address.empty()
            ? "server without address"
            : absl::StrCat("server address \"",
                           address.size() > 40 ? "<300 bytes>:1" : address,
                           "\""),
        [&, address] {
          v1::RegisterRequest r;
          r.set_role(v1::SERVER);
          r.set_address(address);
          return Register(r);
        },
        Code::INVALID_ARGUMENT, "address:");
  }
  add(
      "Register", "too many held assignments",
      [&] {
        v1::RegisterRequest r = worker_node;
        for (int i = 0; i <= kMaxHeldAssignments; ++i) {
          auto* h = r.add_held();
          h->set_job_id(running);
        }
        return Register(r);
      },
      Code::INVALID_ARGUMENT, "held:");
  add(
      "Register", "held index -1",
      [&] {
        v1::RegisterRequest r = worker_node;
        auto* h = r.add_held();
        h->set_job_id(running);
        h->set_index(-1);
        return Register(r);
      },
      Code::INVALID_ARGUMENT, "held[0].index:");
  add(
      "Heartbeat", "node_id empty",
      [&] {
        return Call(cluster_.get(), &v1::ClusterService::Stub::Heartbeat,
                    v1::HeartbeatRequest());
      },
      Code::INVALID_ARGUMENT, "node_id: required");
  add(
      "Heartbeat", "unknown node",
      [&] {
        v1::HeartbeatRequest r;
        r.set_node_id("worker-0");
        return Call(cluster_.get(), &v1::ClusterService::Stub::Heartbeat, r);
      },
      Code::NOT_FOUND, "node_id:");
  add(
      "ReportProgress", "node_id with a newline",
      [&] {
        auto r = report();
        r.set_node_id("worker\n1");
        return Report(r);
      },
      Code::INVALID_ARGUMENT, "node_id:");
  add(
      "ReportProgress", "unknown job",
      [&] {
        auto r = report();
        r.set_job_id("job-999999");
        return Report(r);
      },
      Code::NOT_FOUND, "job_id:");
  add(
      "ReportProgress", "not the job's worker",
      [&] {
        auto r = report();
        r.set_node_id(other);
        return Report(r);
      },
      Code::PERMISSION_DENIED, "worker_index:");
  add(
      "ReportProgress", "worker_index 4096",
      [&] {
        auto r = report();
        r.set_worker_index(4096);
        return Report(r);
      },
      Code::INVALID_ARGUMENT, "worker_index:");
  add(
      "ReportProgress", "clock -1",
      [&] {
        auto r = report();
        r.set_clock(-1);
        return Report(r);
      },
      Code::INVALID_ARGUMENT, "clock:");
  add(
      "ReportProgress", "test_accuracy NaN",
      [&] {
        auto r = report();
        r.set_test_accuracy(nan);
        return Report(r);
      },
      Code::INVALID_ARGUMENT, "test_accuracy:");
  add(
      "ReportProgress", "test_accuracy 1.5",
      [&] {
        auto r = report();
        r.set_test_accuracy(1.5f);
        return Report(r);
      },
      Code::INVALID_ARGUMENT, "test_accuracy:");
  add(
      "ReportProgress", "error of 17 KiB",
      [&] {
        auto r = report();
        r.set_error(std::string(17 << 10, 'e'));
        return Report(r);
      },
      Code::INVALID_ARGUMENT, "error:");
  add(
      "UploadModel", "not the job's worker 0",
      [&] {
        auto r = upload();
        r.set_node_id(other);
        return Upload(r);
      },
      Code::PERMISSION_DENIED, "node_id:");
  add(
      "UploadModel", "tensor of the wrong shape",
      [&] {
        auto r = upload();
        r.mutable_model()->mutable_tensors(0)->set_shape(1, 3);
        return Upload(r);
      },
      Code::INVALID_ARGUMENT, "~tensors[0]: expected dense0.weight [3, 2]");
  add(
      "UploadModel", "tensor data short",
      [&] {
        auto r = upload();
        r.mutable_model()->mutable_tensors(1)->mutable_data()->resize(4);
        return Upload(r);
      },
      Code::INVALID_ARGUMENT, "~tensors[1] (dense0.bias)");
  add(
      "UploadModel", "tensor name of 300 bytes",
      [&] {
        auto r = upload();
        r.mutable_model()->mutable_tensors(0)->set_name(std::string(300, 'n'));
        return Upload(r);
      },
      Code::INVALID_ARGUMENT, "model.tensors[0].name:");
  add(
      "UploadModel", "unknown job",
      [&] {
        auto r = upload();
        r.mutable_model()->set_job_id("job-999999");
        return Upload(r);
      },
      Code::NOT_FOUND, "model.job_id:");
}

}  // namespace malformed_input
}  // namespace ps

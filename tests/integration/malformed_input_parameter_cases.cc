// Refusal cases of ParameterService: Pull, PullShared, PushShared and Push.
#include "tests/integration/malformed_input_cluster.h"

namespace ps {
namespace malformed_input {

void RefusalCluster::AddPullCases(std::vector<Case>& cases) {
  using Code = grpc::StatusCode;
  auto add = CaseAdder(cases);
  // ParameterService.Pull.
  add(
      "Pull", "no cluster secret",
      [&] { return Pull(GoodPull(), outsider_parameters_.get()); },
      Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
  add(
      "Pull", "job_id empty",
      [&] {
        auto r = GoodPull();
        r.clear_job_id();
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "job_id: required");
  add(
      "Pull", "job_id of 1 MB",
      [&] {
        auto r = GoodPull();
        r.set_job_id(std::string(1 << 20, 'j'));
        return Pull(r);
      },
      Code::RESOURCE_EXHAUSTED, "~Received message larger than max");
  add(
      "Pull", "job_id of 65 bytes",
      [&] {
        auto r = GoodPull();
        r.set_job_id(std::string(65, 'j'));
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "job_id: longer than 64 bytes");
  add(
      "Pull", "job_id with '/'",
      [&] {
        auto r = GoodPull();
        r.set_job_id("job/1");
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "job_id: may hold only");
  add(
      "Pull", "job not held here",
      [&] {
        auto r = GoodPull();
        r.set_job_id("job-000404");
        return Pull(r);
      },
      Code::NOT_FOUND, "job_id:");
  add(
      "Pull", "stale map_version",
      [&] {
        auto r = GoodPull();
        r.set_map_version(0);
        return Pull(r);
      },
      Code::FAILED_PRECONDITION, "map_version:");
  add(
      "Pull", "worker_index -1",
      [&] {
        auto r = GoodPull();
        r.set_worker_index(-1);
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "worker_index:");
  add(
      "Pull", "worker_index = num_workers",
      [&] {
        auto r = GoodPull();
        r.set_worker_index(2);
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "worker_index:");
  add(
      "Pull", "clock -1",
      [&] {
        auto r = GoodPull();
        r.set_clock(-1);
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "clock:");
  add(
      "Pull", "clock past the worker's pushes",
      [&] {
        auto r = GoodPull();
        r.set_clock(7);
        return Pull(r);
      },
      Code::FAILED_PRECONDITION, "clock:");
  add(
      "Pull", "key not held",
      [&] {
        auto r = GoodPull();
        r.add_keys(BlockKey(9, 0));
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "keys:");
  add(
      "Pull", "key repeated",
      [&] {
        auto r = GoodPull();
        r.add_keys(kW0);
        r.add_keys(kW0);
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "keys:");
  add(
      "Pull", "more keys than blocks held",
      [&] {
        auto r = GoodPull();
        for (int i = 0; i < 100000; ++i) r.add_keys(kW0);
        return Pull(r);
      },
      Code::INVALID_ARGUMENT, "keys:");

  // Pull and Push are raw methods (the server parses their bytes itself), so
  // bytes that are no request get INVALID_ARGUMENT rather than gRPC's
  // UNIMPLEMENTED.
  add(
      "Pull", "bytes that are no PullRequest",
      [&] {
        return RawCall("/ps.v1.ParameterService/Pull", "\xff\xff\xff\xff",
                       member_parameters_channel_);
      },
      Code::INVALID_ARGUMENT, "PullRequest: not a valid message");

  // ParameterService.PushShared and PullShared: who may call is checked
  // before the bytes are read, as for Push and Pull.
  for (const char* method : {"PushShared", "PullShared"}) {
    const std::string path = absl::StrCat("/ps.v1.ParameterService/", method);
    add(
        method, "no cluster secret, bytes that are no request",
        [&, path] {
          return RawCall(path, "\xff\xff\xff\xff",
                         CreateChannel(server_->address()));
        },
        Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
    add(
        method, "bytes that are no request",
        [&, path] {
          return RawCall(path, "\xff\xff\xff\xff", member_parameters_channel_);
        },
        Code::INVALID_ARGUMENT,
        absl::StrCat("Shared", std::string(method).substr(0, 4),
                     "Request: not a valid message"));
  }
}

void RefusalCluster::AddPushCases(std::vector<Case>& cases) {
  using Code = grpc::StatusCode;
  auto add = CaseAdder(cases);
  // ParameterService.Push.
  add(
      "Push", "no cluster secret",
      [&] { return Push(GoodPush(), outsider_parameters_.get()); },
      Code::UNAUTHENTICATED, "x-ps-cluster-secret:");
  add(
      "Push", "job_id empty",
      [&] {
        auto r = GoodPush();
        r.clear_job_id();
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "job_id: required");
  add(
      "Push", "stale map_version",
      [&] {
        auto r = GoodPush();
        r.set_map_version(2);
        return Push(r);
      },
      Code::FAILED_PRECONDITION, "map_version:");
  add(
      "Push", "worker_index 5 of 2",
      [&] {
        auto r = GoodPush();
        r.set_worker_index(5);
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "worker_index:");
  add(
      "Push", "clock -1",
      [&] {
        auto r = GoodPush();
        r.set_clock(-1);
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "clock:");
  add(
      "Push", "clock gap (3 before 0)",
      [&] {
        auto r = GoodPush();
        r.set_clock(3);
        return Push(r);
      },
      Code::FAILED_PRECONDITION, "clock:");
  add(
      "Push", "unknown key",
      [&] {
        auto r = GoodPush();
        r.mutable_gradients(1)->set_key(BlockKey(7, 7));
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradients:");
  add(
      "Push", "key repeated",
      [&] {
        auto r = GoodPush();
        *r.add_gradients() = r.gradients(0);
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradients:");
  add(
      "Push", "data not whole float32s (15 bytes)",
      [&] {
        auto r = GoodPush();
        r.mutable_gradients(0)->mutable_data()->resize(15);
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradients:");
  add(
      "Push", "data of the wrong size (8 of 16 bytes)",
      [&] {
        auto r = GoodPush();
        r.mutable_gradients(0)->mutable_data()->resize(8);
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradients:");
  add(
      "Push", "FP16 data of float32 size (16 of 8 bytes)",
      [&] {
        auto r = GoodPush();
        r.set_gradient_encoding(v1::FP16);
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradients:");
  add(
      "Push", "gradient_encoding 5",
      [&] {
        auto r = GoodPush();
        r.set_gradient_encoding(static_cast<v1::Precision>(5));
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradient_encoding:");
  add(
      "Push", "NaN (policy NON_FINITE_REFUSE)",
      [&] {
        auto r = GoodPush();
        std::vector<float> values = {0, nan};
        EncodeFloats(values, r.mutable_gradients(1)->mutable_data());
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradients:");
  add(
      "Push", "Inf (policy NON_FINITE_REFUSE)",
      [&] {
        auto r = GoodPush();
        std::vector<float> values = {std::numeric_limits<float>::infinity(), 0};
        EncodeFloats(values, r.mutable_gradients(2)->mutable_data());
        return Push(r);
      },
      Code::INVALID_ARGUMENT, "gradients:");
  add(
      "Push", "message over the server's limit (2 MB)",
      [&] {
        auto r = GoodPush();
        r.mutable_gradients(0)->mutable_data()->resize(2 << 20);
        return Push(r);
      },
      Code::RESOURCE_EXHAUSTED, "~Received message larger than max");
  // Bytes that are no PushRequest (the server parses them in place).
  add(
      "Push", "bytes that are no PushRequest",
      [&] {
        return RawCall("/ps.v1.ParameterService/Push", "\xff\xff\xff\xff",
                       member_parameters_channel_);
      },
      Code::INVALID_ARGUMENT, "PushRequest: not a valid message");
  add(
      "Push", "job_id that is not UTF-8",
      [&] {
        auto r = GoodPush();
        r.set_job_id("\xc3");  // Serialized as is; the server refuses it.
        return RawCall("/ps.v1.ParameterService/Push", r.SerializeAsString(),
                       member_parameters_channel_);
      },
      Code::INVALID_ARGUMENT, "PushRequest: not a valid message");
  add(
      "Push", "gradient block cut short",
      [&] {
        std::string bytes = GoodPush().SerializeAsString();
        bytes.pop_back();
        return RawCall("/ps.v1.ParameterService/Push", bytes,
                       member_parameters_channel_);
      },
      Code::INVALID_ARGUMENT, "PushRequest: not a valid message");
}

}  // namespace malformed_input
}  // namespace ps

// Refusal cases of JobService, of requests that do not parse, and of
// requests over what each method takes.
#include "tests/integration/malformed_input_cluster.h"

namespace ps {
namespace malformed_input {

void RefusalCluster::AddJobServiceCases(std::vector<Case>& cases) {
  using Code = grpc::StatusCode;
  auto add = CaseAdder(cases);
  // JobService.
  add(
      "SubmitJob", "no token",
      [&] { return Submit(Spec(), anonymous_jobs_.get()); },
      Code::UNAUTHENTICATED, "authorization:");
  add(
      "SubmitJob", "epochs 0",
      [&] {
        auto spec = Spec();
        spec.set_epochs(0);
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "epochs:");
  add(
      "SubmitJob", "num_workers 2000",
      [&] {
        auto spec = Spec();
        spec.set_num_workers(2000);
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "num_workers:");
  add(
      "SubmitJob", "model of 70000 blocks",
      [&] {
        auto spec = Spec();
        spec.mutable_model()->set_input_dim(35000);
        spec.set_block_elems(1);
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "block_elems:");
  add(
      "SubmitJob", "model over --max_model_bytes (4 MB > 1 MiB)",
      [&] {
        auto spec = Spec();
        spec.mutable_model()->set_input_dim(500000);
        spec.set_block_elems(kDefaultBlockElems);
        return Submit(spec);
      },
      Code::RESOURCE_EXHAUSTED, "model:");
  add(
      "SubmitJob", "learning_rate NaN",
      [&] {
        auto spec = Spec();
        spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(nan);
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "optimizer.sgd.learning_rate:");
  add(
      "SubmitJob", "data set path of 5000 bytes",
      [&] {
        auto spec = Spec();
        spec.mutable_dataset()->set_train_images(std::string(5000, 'p'));
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "dataset.train_images:");
  add(
      "SubmitJob", "non_finite_gradients 9",
      [&] {
        auto spec = Spec();
        spec.set_non_finite_gradients(static_cast<v1::NonFinitePolicy>(9));
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "non_finite_gradients:");
  // The coordinator's unary methods parse their own bytes (FinishRawUnary):
  // a request that does not parse gets INVALID_ARGUMENT with a message,
  // where gRPC's callback API would answer UNIMPLEMENTED with none.
  add(
      "SubmitJob", "bytes that are no SubmitJobRequest",
      [&] {
        return RawCall("/ps.v1.JobService/SubmitJob", "\xff\xff\xff\xff");
      },
      Code::INVALID_ARGUMENT, "SubmitJobRequest: not a valid message");
  add(
      "Register", "bytes that are no RegisterRequest",
      [&] { return RawCall("/ps.v1.ClusterService/Register", "\x0a\xff\xff"); },
      Code::INVALID_ARGUMENT, "RegisterRequest: not a valid message");
}

void RefusalCluster::AddSizeLimitCases(std::vector<Case>& cases) {
  using Code = grpc::StatusCode;
  auto add = CaseAdder(cases);
  // Each method takes at most what it needs, refused before it is parsed.
  add(
      "GetJob", "request of 100 KB (over the 64 KiB GetJob takes)",
      [&] {
        v1::GetJobRequest r;
        r.set_job_id(std::string(100000, 'j'));
        return Call(jobs_.get(), &v1::JobService::Stub::GetJob, r);
      },
      Code::RESOURCE_EXHAUSTED, "GetJobRequest: 100004 bytes, more than");
  add(
      "Heartbeat", "request of 100 KB (over the 64 KiB Heartbeat takes)",
      [&] {
        v1::HeartbeatRequest r;
        r.set_node_id(std::string(100000, 'n'));
        return Call(cluster_.get(), &v1::ClusterService::Stub::Heartbeat, r);
      },
      Code::RESOURCE_EXHAUSTED, "HeartbeatRequest: 100004 bytes");
  add(
      "SubmitJob", "name with a newline (log-line injection)",
      [&] {
        auto spec = Spec();
        spec.set_name("x\n2026-01-01T00:00:00.000 I job-000001 cancelled");
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "name:");
  add(
      "SubmitJob", "data set path with a NUL byte",
      [&] {
        auto spec = Spec();
        spec.mutable_dataset()->set_train_images(
            std::string("/data/train\0/../other", 21));
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "dataset.train_images:");
  add(
      "SubmitJob", "activation 99",
      [&] {
        auto spec = Spec();
        spec.mutable_model()->set_activation(static_cast<v1::Activation>(99));
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "model.activation:");
  add(
      "SubmitJob", "Adam weight_decay Infinity",
      [&] {
        auto spec = Spec();
        auto* adam = spec.mutable_optimizer()->mutable_adam();
        adam->set_learning_rate(0.01f);
        adam->set_weight_decay(std::numeric_limits<float>::infinity());
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "optimizer.adam.weight_decay:");
  add(
      "SubmitJob", "no model",
      [&] {
        auto spec = Spec();
        spec.clear_model();
        return Submit(spec);
      },
      Code::INVALID_ARGUMENT, "model: required");
  add(
      "SubmitJob", "hidden layer 2^30 wide",
      [&] {
        auto spec = Spec();
        spec.mutable_model()->set_kind(v1::ModelSpec::MLP);
        spec.mutable_model()->add_hidden_layers(1 << 30);
        return Submit(spec);
      },
      Code::RESOURCE_EXHAUSTED, "model:");
  add(
      "SubmitJob", "name that is not UTF-8",
      [&] {
        v1::JobSpec spec = Spec();
        spec.set_name(
            "\xc3");  // Serialized as is; the server's parser refuses it.
        v1::SubmitJobRequest r;
        *r.mutable_spec() = spec;
        return RawCall("/ps.v1.JobService/SubmitJob", r.SerializeAsString());
      },
      Code::INVALID_ARGUMENT, "SubmitJobRequest: not a valid message");
  add(
      "GetJob", "job_id empty",
      [&] {
        return Call(jobs_.get(), &v1::JobService::Stub::GetJob,
                    v1::GetJobRequest());
      },
      Code::INVALID_ARGUMENT, "job_id: required");
  add(
      "CancelJob", "job_id empty",
      [&] {
        return Call(jobs_.get(), &v1::JobService::Stub::CancelJob,
                    v1::CancelJobRequest());
      },
      Code::INVALID_ARGUMENT, "job_id: required");
  add(
      "ExportModel", "job_id empty",
      [&] {
        return Call(jobs_.get(), &v1::JobService::Stub::ExportModel,
                    v1::ExportModelRequest());
      },
      Code::INVALID_ARGUMENT, "job_id: required");
  add(
      "ExportModel", "no token",
      [&] {
        v1::ExportModelRequest r;
        r.set_job_id(running);
        return Call(anonymous_jobs_.get(), &v1::JobService::Stub::ExportModel,
                    r);
      },
      Code::UNAUTHENTICATED, "authorization:");
  add(
      "GetJob", "job_id of 100 bytes",
      [&] {
        v1::GetJobRequest r;
        r.set_job_id(std::string(100, 'j'));
        return Call(jobs_.get(), &v1::JobService::Stub::GetJob, r);
      },
      Code::INVALID_ARGUMENT, "job_id: longer than 64 bytes");
  add(
      "GetJob", "unknown job",
      [&] {
        v1::GetJobRequest r;
        r.set_job_id("job-999999");
        return Call(jobs_.get(), &v1::JobService::Stub::GetJob, r);
      },
      Code::NOT_FOUND, "job_id:");
  add(
      "CancelJob", "job_id with a space",
      [&] {
        v1::CancelJobRequest r;
        r.set_job_id("job 1");
        return Call(jobs_.get(), &v1::JobService::Stub::CancelJob, r);
      },
      Code::INVALID_ARGUMENT, "job_id: may hold only");
  add(
      "ExportModel", "a running job",
      [&] {
        v1::ExportModelRequest r;
        r.set_job_id(running);
        return Call(jobs_.get(), &v1::JobService::Stub::ExportModel, r);
      },
      Code::NOT_FOUND, "~has no trained model");
  add(
      "WatchJob", "no token",
      [&] {
        grpc::ClientContext ctx;
        v1::WatchJobRequest r;
        r.set_job_id(running);
        auto reader = anonymous_jobs_->WatchJob(&ctx, r);
        v1::JobStatus status;
        while (reader->Read(&status)) {
        }
        return reader->Finish();
      },
      Code::UNAUTHENTICATED, "authorization:");
  add(
      "WatchJob", "job_id empty",
      [&] {
        grpc::ClientContext ctx;
        auto reader = jobs_->WatchJob(&ctx, v1::WatchJobRequest());
        v1::JobStatus status;
        while (reader->Read(&status)) {
        }
        return reader->Finish();
      },
      Code::INVALID_ARGUMENT, "job_id: required");
}

}  // namespace malformed_input
}  // namespace ps

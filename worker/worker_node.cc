#include "worker/worker_node.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ps {

WorkerNode::WorkerNode(WorkerNodeOptions options,
                       std::unique_ptr<Backend> backend)
    : options_(std::move(options)),
      backend_(std::move(backend)),
      registry_(std::make_shared<prometheus::Registry>()),
      metrics_(*registry_) {}

WorkerNode::~WorkerNode() { Stop(); }

absl::Status WorkerNode::Start() {
  PS_ASSIGN_OR_RETURN(auto credentials, Credentials::Load(options_.security));
  PS_ASSIGN_OR_RETURN(auto server_credentials, credentials.ServerCredentials());
  authorizer_ = Authorizer(credentials.MemberChecks());
  trainer_options_ = options_.trainer;
  trainer_options_.parameter_client.channel = credentials.MemberChannel();
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(&builder, options_.limits, options_.reflection);
  builder.AddListeningPort(options_.listen_address, server_credentials, &port_);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("worker: cannot listen on ", options_.listen_address));
  }
  SetServicesServing(server_.get(), {v1::WorkerService::service_full_name()});
  if (!options_.metrics_address.empty()) {
    PS_ASSIGN_OR_RETURN(auto exposer, MetricsExposer::Start(
                                          options_.metrics_address, registry_));
    exposer_ = std::move(exposer);
  }
  MembershipOptions membership;
  membership.coordinator = options_.coordinator;
  membership.role = v1::WORKER;
  membership.channel = credentials.MemberChannel();
  // The place held goes with every heartbeat: an elastic job's joining
  // worker says so when it is ready (Trainer::ReadyForMembership).
  membership.held_in_heartbeats = true;
  // Progress reports and the model upload (up to the model's size) go on a
  // connection of their own, so heartbeats never wait behind an upload.
  ConnectionOptions reports_connection = MemberConnectionOptions();
  reports_connection.dedicated_connection = true;
  reports_stub_ = v1::ClusterService::NewStub(CreateChannel(
      options_.coordinator, credentials.MemberChannel(), reports_connection));
  membership_ = std::make_unique<Membership>(
      membership,
      [this](const std::vector<v1::Assignment>& a) { OnAssignments(a); },
      [this] {
        absl::MutexLock lock(&mu_);
        std::vector<v1::HeldAssignment> held;
        if (trainer_ != nullptr) {
          held.emplace_back().set_job_id(current_job_);
          held.back().set_index(current_index_);
          // Elastic jobs: ready to join the change in progress.
          held.back().set_membership_version(trainer_->ReadyForMembership());
        }
        return held;
      });
  membership_->Start();
  PS_LOG_INFO("worker started, backend ", backend_->name(), ", coordinator ",
              options_.coordinator);
  return absl::OkStatus();
}

void WorkerNode::OnAssignments(const std::vector<v1::Assignment>& assignments) {
  absl::MutexLock lock(&mu_);
  const v1::Assignment* next = assignments.empty() ? nullptr : &assignments[0];
  if (next != nullptr && next->job_id() == current_job_ &&
      next->index() == current_index_) {
    // Elastic jobs: a membership change reaches the trainer this way.
    if (trainer_ != nullptr) trainer_->OfferAssignment(*next);
    return;
  }
  StopTrainer();
  const std::string place =
      next == nullptr ? "" : absl::StrCat(next->job_id(), "/", next->index());
  if (next == nullptr || done_jobs_.contains(place)) return;
  current_job_ = next->job_id();
  current_index_ = next->index();
  done_jobs_.insert(place);
  trainer_ = std::make_unique<Trainer>(
      *next, [m = membership_.get()] { return m->node_id(); },
      reports_stub_.get(), backend_.get(), &metrics_, trainer_options_);
  thread_ = std::thread(
      [trainer = trainer_.get(), retired = std::move(retired_)]() mutable {
        // The stopped trainers end first (their calls were cancelled, so this
        // is brief), so that trainers never share the backend.
        for (Retired& r : retired) r.thread.join();
        retired.clear();
        (void)trainer->Run();
      });
  retired_.clear();
}

grpc::ServerUnaryReactor* WorkerNode::GetWorkerStatus(
    grpc::CallbackServerContext* ctx, const v1::WorkerStatusRequest* request,
    v1::WorkerStatus* response) {
  auto* reactor = ctx->DefaultReactor();
  if (absl::Status allowed = authorizer_.AuthorizeMember(*ctx); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  response->set_node_id(membership_ ? membership_->node_id() : "");
  response->set_backend(backend_->name());
  {
    absl::MutexLock lock(&mu_);
    response->set_job_id(current_job_);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void WorkerNode::StopTrainer() {
  if (trainer_ == nullptr) return;
  trainer_->Stop();
  retired_.push_back({std::move(trainer_), std::move(thread_)});
  current_job_.clear();
  current_index_ = -1;
}

void WorkerNode::Stop() {
  // First: no assignment starts a trainer after this.
  if (membership_) membership_->Stop();
  std::vector<Retired> retired;
  {
    absl::MutexLock lock(&mu_);
    StopTrainer();
    retired = std::move(retired_);
    retired_.clear();
  }
  // Joined without the lock (GetWorkerStatus takes it); each thread first
  // joins the trainers retired before it started.
  for (Retired& r : retired) {
    if (r.thread.joinable()) r.thread.join();
  }
  retired.clear();
  if (server_) {
    // Its only calls (GetWorkerStatus, health) are immediate; the deadline
    // bounds shutdown all the same.
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_->Wait();
    server_.reset();
  }
}

}  // namespace ps

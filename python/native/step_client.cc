#include "python/native/step_client.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/model_layout.h"
#include "common/status_macros.h"

namespace ps::python {

void CallSlot::Start() {
  absl::MutexLock lock(&mu_);
  active_ = true;
  done_ = false;
  status_ = absl::OkStatus();
}

void CallSlot::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
  done_ = true;
}

bool CallSlot::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

absl::Status CallSlot::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  active_ = false;
  return status_;
}

absl::StatusOr<std::unique_ptr<StepClient>> StepClient::Create(
    const v1::Assignment& assignment, StepClientOptions options) {
  PS_ASSIGN_OR_RETURN(std::vector<TensorSpec> tensors,
                      ModelTensors(assignment.spec().model()));
  ParameterClientOptions client_options;
  client_options.pull_timeout = options.pull_timeout;
  client_options.push_timeout = options.push_timeout;
  client_options.retry_window = options.retry_window;
  client_options.shared_payloads = options.shared_payloads;
  client_options.channel = std::move(options.channel);
  // The SDK's pipeline serves no read from a cache (it is not used for jobs
  // with the SSP worker cache).
  client_options.cache = false;
  std::vector<int64_t> sizes;
  sizes.reserve(tensors.size());
  for (const TensorSpec& t : tensors) sizes.push_back(t.num_elems());
  std::vector<int64_t> dims;
  for (const v1::SparseTableSpec& t :
       assignment.spec().model().sparse_tables()) {
    dims.push_back(t.dim());
  }
  PS_ASSIGN_OR_RETURN(
      auto client,
      ParameterClient::Create(assignment, tensors, std::move(client_options),
                              /*stop=*/nullptr));
  return std::unique_ptr<StepClient>(
      new StepClient(std::move(client), std::move(sizes), std::move(dims)));
}

StepClient::StepClient(std::unique_ptr<ParameterClient> client,
                       std::vector<int64_t> sizes, std::vector<int64_t> dims)
    : client_(std::move(client)),
      sizes_(std::move(sizes)),
      dims_(std::move(dims)) {
  grads_.resize(sizes_.size());
  values_.resize(sizes_.size());
  for (size_t t = 0; t < sizes_.size(); ++t) {
    grads_[t].resize(sizes_[t]);
    values_[t].resize(sizes_[t]);
    size_ += sizes_[t];
  }
}

StepClient::~StepClient() {
  client_->Cancel();
  // The callbacks write the slots and gRPC the vectors: wait for them.
  if (push_.active()) push_.Wait().IgnoreError();
  if (pull_.active()) pull_.Wait().IgnoreError();
}

absl::Status StepClient::StartPush(int64_t clock,
                                   std::span<const float> grads) {
  if (push_.active()) {
    return absl::FailedPreconditionError("a push is in flight already");
  }
  PS_RETURN_IF_ERROR(CopyGradients(grads));
  push_.Start();
  client_->PushAsync(clock, &grads_, [this](absl::Status status) {
    push_.Finish(std::move(status));
  });
  return absl::OkStatus();
}

absl::Status StepClient::FinishPush() { return push_.Wait(); }

absl::Status StepClient::StartPull(int64_t clock) {
  if (pull_.active()) {
    return absl::FailedPreconditionError("a pull is in flight already");
  }
  pull_has_rows_ = false;
  pull_.Start();
  client_->PullAsync(clock, &values_, [this](absl::Status status) {
    pull_.Finish(std::move(status));
  });
  return absl::OkStatus();
}

absl::Status StepClient::FinishPull(std::span<float> out) {
  if (!pull_.active()) {
    return absl::FailedPreconditionError("no pull was started");
  }
  PS_RETURN_IF_ERROR(pull_.Wait());
  return CopyValues(out);
}

absl::Status StepClient::CopyGradients(std::span<const float> grads) {
  if (static_cast<int64_t>(grads.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradients: ", grads.size(), " values, expected ", size_));
  }
  const float* from = grads.data();
  for (std::vector<float>& g : grads_) {
    std::memcpy(g.data(), from, g.size() * sizeof(float));
    from += g.size();
  }
  return absl::OkStatus();
}

absl::Status StepClient::CopyValues(std::span<float> out) const {
  if (static_cast<int64_t>(out.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameters: ", out.size(), " values, expected ", size_));
  }
  float* to = out.data();
  for (const std::vector<float>& v : values_) {
    std::memcpy(to, v.data(), v.size() * sizeof(float));
    to += v.size();
  }
  return absl::OkStatus();
}

}  // namespace ps::python

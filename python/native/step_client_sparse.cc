// StepClient's sparse rows (step_client.h): a step's ids and rows of each
// sparse table, pulled and pushed with the dense values through
// ParameterClient::PullStepAsync and PushStepAsync.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "python/native/step_client.h"

namespace ps::python {

absl::Status StepClient::CopyIds(std::span<const std::span<const int64_t>> ids,
                                 SparseStep& step) const {
  if (ids.size() > dims_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ids: ", ids.size(), " tables, the job has ", dims_.size()));
  }
  step.ids.resize(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    if (static_cast<int64_t>(ids[t].size()) > kMaxSparseKeysPerRequest) {
      return absl::InvalidArgumentError(
          absl::StrCat("ids: ", ids[t].size(), " ids of sparse table ", t,
                       " in one step, more than the ", kMaxSparseKeysPerRequest,
                       " a request may name"));
    }
    // int64 ids are keyed by their two's-complement bits.
    step.ids[t].resize(ids[t].size());
    std::memcpy(step.ids[t].data(), ids[t].data(),
                ids[t].size() * sizeof(int64_t));
  }
  return absl::OkStatus();
}

absl::Status StepClient::StartPullRows(
    int64_t clock, std::span<const std::span<const int64_t>> ids) {
  if (pull_.active()) {
    return absl::FailedPreconditionError("a pull is in flight already");
  }
  PS_RETURN_IF_ERROR(CopyIds(ids, pull_rows_));
  pull_has_rows_ = true;
  pull_.Start();
  client_->PullStepAsync(
      clock, &values_, &pull_rows_,
      [this](absl::Status status) { pull_.Finish(std::move(status)); });
  return absl::OkStatus();
}

absl::Status StepClient::FinishPullRows(
    std::span<float> out, std::span<const std::span<float>> rows) {
  if (!pull_.active()) {
    return absl::FailedPreconditionError("no pull was started");
  }
  PS_RETURN_IF_ERROR(pull_.Wait());
  if (!pull_has_rows_) {
    return absl::FailedPreconditionError("the pull was started without rows");
  }
  PS_RETURN_IF_ERROR(CopyValues(out));
  if (rows.size() != pull_rows_.ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows: ", rows.size(), " buffers, the pull read ",
                     pull_rows_.ids.size(), " tables"));
  }
  for (size_t t = 0; t < rows.size(); ++t) {
    const std::vector<float>& pulled = pull_rows_.rows[t];
    if (rows[t].size() != pulled.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rows[", t, "]: ", rows[t].size(), " values, expected ",
                       pulled.size(), " (", pull_rows_.ids[t].size(),
                       " ids of dim ", dims_[t], ")"));
    }
    std::memcpy(rows[t].data(), pulled.data(), pulled.size() * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status StepClient::StartPushRows(
    int64_t clock, std::span<const float> grads,
    std::span<const std::span<const int64_t>> ids,
    std::span<const std::span<const float>> row_grads) {
  if (push_.active()) {
    return absl::FailedPreconditionError("a push is in flight already");
  }
  if (ids.size() != row_grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row gradients: ", row_grads.size(), " tables, ids of ", ids.size()));
  }
  PS_RETURN_IF_ERROR(CopyIds(ids, push_rows_));
  push_rows_.row_grads.resize(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    const size_t expected = ids[t].size() * static_cast<size_t>(dims_[t]);
    if (row_grads[t].size() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row gradients[", t, "]: ", row_grads[t].size(), " values, expected ",
          expected, " (", ids[t].size(), " ids of dim ", dims_[t], ")"));
    }
    push_rows_.row_grads[t].assign(row_grads[t].begin(), row_grads[t].end());
  }
  PS_RETURN_IF_ERROR(CopyGradients(grads));
  push_.Start();
  // The rows are read (copied into the requests) before this returns; the
  // dense gradients (grads_) stay until the push ends.
  client_->PushStepAsync(
      clock, &grads_, &push_rows_,
      [this](absl::Status status) { push_.Finish(std::move(status)); });
  return absl::OkStatus();
}

}  // namespace ps::python

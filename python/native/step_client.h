// The Python SDK's compiled transport (paramserver._native, docs/python.md,
// "The compiled transport"): a dense step's push and pull through the C++
// worker's ParameterClient (worker/parameter_client.h) — its gRPC callback
// calls, its same-host shared memory, its retries — started and waited for
// by the Python training thread. Nothing here touches Python: module.cc
// binds it and releases the GIL around every call that copies or waits.
#ifndef PS_PYTHON_NATIVE_STEP_CLIENT_H_
#define PS_PYTHON_NATIVE_STEP_CLIENT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "worker/parameter_client.h"

namespace ps::python {

// How StepClient::Create connects (the Python ParameterClient's arguments).
struct StepClientOptions {
  // Deadlines of one Pull and one Push attempt, and how long retries go on.
  // Defaults: ParameterClientOptions'.
  absl::Duration pull_timeout = absl::Seconds(30);
  absl::Duration push_timeout = absl::Seconds(30);
  absl::Duration retry_window = absl::Seconds(120);
  // Payloads to servers on this host through shared memory. Default true.
  bool shared_payloads = true;
  // TLS and call metadata (the cluster secret). Default: plaintext.
  ChannelSecurity channel;
};

// One call in flight (a push or a pull) and its outcome. Thread-safe.
class CallSlot {
 public:
  // Marks a call started; its outcome is unknown until Finish.
  void Start();
  // Records the outcome (a gRPC thread, or inline).
  void Finish(absl::Status status);
  // Whether a call was started and not yet waited for.
  bool active() const;
  // Waits for the started call's outcome and marks the slot idle. OK if no
  // call was started.
  absl::Status Wait();

 private:
  mutable absl::Mutex mu_;
  bool active_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// A job's pushes and pulls of one worker, over flat float32 vectors of
// every tensor in the model's order (the Python SDK's layout), and, for a
// job with sparse tables, the rows of a step's ids of each table with them
// (in the same request to each server: ParameterClient::PullStepAsync and
// PushStepAsync).
// Threads: one thread starts and finishes calls (the training thread); one
// push and one pull may be in flight at once; Cancel from any thread.
class StepClient {
 public:
  // `assignment`: the worker's (its spec and shard map). Errors:
  // INVALID_ARGUMENT for a spec whose tensors cannot be laid out, or a shard
  // map that does not match them.
  static absl::StatusOr<std::unique_ptr<StepClient>> Create(
      const v1::Assignment& assignment, StepClientOptions options);
  // Cancels the calls in flight and waits for them to end.
  ~StepClient();

  // Values in the flat vector, and per tensor.
  int64_t size() const { return size_; }
  const std::vector<int64_t>& tensor_sizes() const { return sizes_; }

  // Starts the push of `clock`'s gradients (`size()` values, copied before
  // this returns). Errors: FAILED_PRECONDITION if a push is in flight;
  // INVALID_ARGUMENT for a wrong length.
  absl::Status StartPush(int64_t clock, std::span<const float> grads);
  // Waits for the push started last: the servers' error once retries are
  // exhausted, CANCELLED after Cancel. OK when none was started.
  absl::Status FinishPush();
  // Starts the pull of `clock`'s parameters. Errors: FAILED_PRECONDITION if a
  // pull is in flight.
  absl::Status StartPull(int64_t clock);
  // Waits for the pull started last and copies its values into `out`
  // (`size()` values). Errors: as FinishPush; INVALID_ARGUMENT for a wrong
  // length (the pull is still waited for); FAILED_PRECONDITION when no pull
  // was started.
  absl::Status FinishPull(std::span<float> out);
  // Sparse tables (step_client_sparse.cc). Tables are in the job's order
  // (model.sparse_tables); `ids` has one entry per table or fewer (the
  // tables after it read no row), each the table's distinct ids (int64 as
  // their two's-complement bits).
  //
  // The job's tables: how many, and each one's values per row.
  size_t num_tables() const { return dims_.size(); }
  const std::vector<int64_t>& table_dims() const { return dims_; }
  // StartPull with the rows of `ids` (copied before this returns). Errors:
  // FAILED_PRECONDITION if a pull is in flight; INVALID_ARGUMENT for more
  // tables than the job has, or more ids than one request may name.
  absl::Status StartPullRows(int64_t clock,
                             std::span<const std::span<const int64_t>> ids);
  // FinishPull for a pull with rows: the dense values into `out`, and the
  // rows of table t's ids (in their order) into `rows[t]` (ids[t].size() *
  // dim values; one entry per table the pull named). Errors: as
  // FinishPull; INVALID_ARGUMENT for a wrong number or length of buffers,
  // or a pull started without rows.
  absl::Status FinishPullRows(std::span<float> out,
                              std::span<const std::span<float>> rows);
  // StartPush with the gradients of rows: `row_grads[t]` of `ids[t]`
  // (ids[t].size() * dim values each), copied before this returns. Errors:
  // as StartPush; INVALID_ARGUMENT when ids and row_grads differ in count
  // or length, or name more tables than the job has.
  absl::Status StartPushRows(int64_t clock, std::span<const float> grads,
                             std::span<const std::span<const int64_t>> ids,
                             std::span<const std::span<const float>> row_grads);

  // Whether a pull is in flight (started, not finished).
  bool pulling() const { return pull_.active(); }
  // Ends the calls in flight and every later one (CANCELLED). Any thread.
  void Cancel() { client_->Cancel(); }

  // ParameterClient's counters.
  int64_t pushed_bytes() const { return client_->pushed_bytes(); }
  int64_t pulled_bytes() const { return client_->pulled_bytes(); }
  int64_t pulls_made() const { return client_->pulls_made(); }

 private:
  StepClient(std::unique_ptr<ParameterClient> client,
             std::vector<int64_t> sizes, std::vector<int64_t> dims);
  // Copies `grads` into grads_ (its length checked).
  absl::Status CopyGradients(std::span<const float> grads);
  // Copies the pulled dense values into `out` (its length checked).
  absl::Status CopyValues(std::span<float> out) const;
  // Copies `ids` into `step`'s ids (checked against the job's tables).
  absl::Status CopyIds(std::span<const std::span<const int64_t>> ids,
                       SparseStep& step) const;

  std::unique_ptr<ParameterClient> client_;
  std::vector<int64_t> sizes_;
  int64_t size_ = 0;
  // The push's gradients and the pull's values, per tensor: gRPC reads and
  // writes them while a call is in flight.
  std::vector<std::vector<float>> grads_;
  std::vector<std::vector<float>> values_;
  // Values per row of each sparse table.
  std::vector<int64_t> dims_;
  // The pull's ids and rows (ParameterClient writes the rows while the pull
  // is in flight); the push's ids and row gradients (read before
  // PushStepAsync returns). Whether the pull in flight asked for rows.
  SparseStep pull_rows_;
  SparseStep push_rows_;
  bool pull_has_rows_ = false;
  CallSlot push_;
  CallSlot pull_;
};

}  // namespace ps::python

#endif  // PS_PYTHON_NATIVE_STEP_CLIENT_H_

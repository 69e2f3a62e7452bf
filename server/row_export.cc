#include "server/row_export.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "server/sparse_bucket_codec.h"

namespace ps {
namespace {

std::vector<int> TableDims(const v1::JobSpec& spec) {
  std::vector<int> dims;
  for (const auto& t : spec.model().sparse_tables()) dims.push_back(t.dim());
  return dims;
}

// The buckets of `blocks` that hold rows, ascending.
std::vector<StoredBlock> BucketsOf(std::vector<StoredBlock> blocks) {
  std::vector<StoredBlock> buckets;
  for (StoredBlock& b : blocks) {
    if (IsBucketKey(b.key) && !b.rows.empty()) buckets.push_back(std::move(b));
  }
  std::sort(
      buckets.begin(), buckets.end(),
      [](const StoredBlock& a, const StoredBlock& b) { return a.key < b.key; });
  return buckets;
}

}  // namespace

RowExporter::RowExporter(ShardStore* store, ServerMetrics* metrics)
    : store_(store), metrics_(metrics), thread_([this] { Loop(); }) {}

RowExporter::~RowExporter() { Stop(); }

void RowExporter::Read(const v1::ReadRowsRequest& request,
                       std::shared_ptr<ServerJob> live, Done done) {
  if (auto s = ValidateId("job_id", request.job_id()); !s.ok()) {
    done(s);
    return;
  }
  if (request.server_index() < 0 || request.max_bytes() < 0 ||
      request.max_bytes() > kMaxReadRowsBytes) {
    done(absl::InvalidArgumentError(
        absl::StrCat("server_index must be >= 0 and max_bytes in [0, ",
                     kMaxReadRowsBytes, "]")));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back({request, std::move(live), std::move(done)});
      return;
    }
  }
  done(absl::UnavailableError("parameter server shutting down"));
}

bool RowExporter::Busy(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  if (busy_job_ == job_id) return true;
  return std::any_of(queue_.begin(), queue_.end(), [&](const Pending& p) {
    return p.request.job_id() == job_id;
  });
}

void RowExporter::Stop() {
  std::deque<Pending> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (Pending& p : dropped) {
    p.done(absl::UnavailableError("parameter server shutting down"));
  }
  if (thread_.joinable()) thread_.join();
}

void RowExporter::Loop() {
  while (true) {
    Pending next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RowExporter* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stopping_ || !e->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // Stopping.
      next = std::move(queue_.front());
      queue_.pop_front();
      busy_job_ = next.request.job_id();
    }
    absl::StatusOr<v1::ReadRowsResponse> reply = Serve(next);
    if (!reply.ok() || reply->done()) held_.reset();
    {
      absl::MutexLock lock(&mu_);
      busy_job_ = held_ != nullptr ? held_->job_id : std::string();
    }
    next.done(std::move(reply));
  }
}

absl::Status RowExporter::Hold(const Pending& pending) {
  const v1::ReadRowsRequest& request = pending.request;
  // A read from the first bucket starts anew (a live job's rows change).
  const bool first = request.table() == 0 && request.bucket() == 0;
  if (!first && held_ != nullptr && held_->job_id == request.job_id() &&
      held_->server_index == request.server_index()) {
    return absl::OkStatus();
  }
  held_.reset();
  auto held = std::make_unique<Held>();
  held->job_id = request.job_id();
  held->server_index = request.server_index();
  if (pending.live != nullptr) {
    held->dims = TableDims(pending.live->assignment().spec());
    held->buckets = BucketsOf(pending.live->SparseSnapshot());
    held_ = std::move(held);
    return absl::OkStatus();
  }
  const auto not_found = [&] {
    return absl::NotFoundError(absl::StrCat(
        "job ", request.job_id(),
        ": this server neither serves nor stores it (a job with durability "
        "MEMORY keeps no rows once it ends; a deleted job none)"));
  };
  if (store_ == nullptr) return not_found();
  auto stored = store_->Load(request.job_id());
  if (absl::IsNotFound(stored.status())) return not_found();
  if (!stored.ok()) return stored.status();
  v1::Assignment assignment;
  if (!assignment.ParseFromString(stored->meta)) {
    return absl::DataLossError(absl::StrCat(
        "job ", request.job_id(), ": the stored job's identity is unreadable"));
  }
  held->dims = TableDims(assignment.spec());
  if (stored->log.empty()) {
    // A clean close wrote a last snapshot: its buckets are the final rows.
    held->buckets = BucketsOf(std::move(stored->blocks));
  } else {
    // Records after the snapshot: replay them as a restart would.
    stored = absl::StatusOr<StoredJob>();  // Free it before the reopen.
    if (request.server_index() >= assignment.shard_map().servers_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("server_index: the job has ",
                       assignment.shard_map().servers_size(), " servers"));
    }
    assignment.set_index(request.server_index());
    auto job = ServerJob::Open(assignment, store_, metrics_);
    if (!job.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", request.job_id(), ": cannot reopen it as server ",
          request.server_index(), ": ", job.status().message()));
    }
    held->buckets = BucketsOf((*job)->SparseSnapshot());
  }
  held_ = std::move(held);
  return absl::OkStatus();
}

absl::StatusOr<v1::ReadRowsResponse> RowExporter::Serve(
    const Pending& pending) {
  PS_RETURN_IF_ERROR(Hold(pending));
  const v1::ReadRowsRequest& request = pending.request;
  const int64_t max_bytes =
      request.max_bytes() > 0 ? request.max_bytes() : kDefaultReadRowsBytes;
  const std::vector<StoredBlock>& buckets = held_->buckets;
  auto it = std::lower_bound(
      buckets.begin(), buckets.end(),
      BucketKey(request.table(), request.bucket()),
      [](const StoredBlock& b, uint64_t key) { return b.key < key; });
  v1::ReadRowsResponse reply;
  int64_t bytes = 0;
  for (; it != buckets.end(); ++it) {
    const uint32_t table = BucketTable(it->key);
    if (table >= held_->dims.size()) {
      return absl::DataLossError(absl::StrCat("job ", held_->job_id,
                                              ": a stored bucket of table ",
                                              table, ", which it lacks"));
    }
    PS_ASSIGN_OR_RETURN(const SparseBucket bucket,
                        DecodeSparseBucket(it->rows));
    const size_t dim = static_cast<size_t>(held_->dims[table]);
    const size_t n = bucket.ids.size();
    if (bucket.dim != dim) {
      return absl::DataLossError(
          absl::StrCat("job ", held_->job_id, ": a stored bucket of table ",
                       table, " has dim ", bucket.dim, ", the spec ", dim));
    }
    if (n == 0) continue;  // Only ids counted toward admission.
    const int64_t page_bytes = static_cast<int64_t>(n * (8 + 4 * dim));
    if (reply.rows_size() > 0 && bytes + page_bytes > max_bytes) break;
    bytes += page_bytes;
    v1::SparseRows* rows = reply.add_rows();
    rows->set_table(table);
    rows->mutable_keys()->assign(
        reinterpret_cast<const char*>(bucket.ids.data()), n * 8);
    std::string* values = rows->mutable_values();
    values->resize(n * dim * 4);
    const size_t stride = dim + bucket.state_floats;
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(values->data() + i * dim * 4, &bucket.floats[i * stride],
                  dim * 4);
    }
  }
  if (it == buckets.end()) {
    reply.set_done(true);
  } else {
    reply.set_next_table(BucketTable(it->key));
    reply.set_next_bucket(BucketIndex(it->key));
  }
  return reply;
}

}  // namespace ps

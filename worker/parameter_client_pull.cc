// ParameterClient: the pull. One request per server, for its blocks (and
// the sparse rows it holds), each reply read where the transport holds it
// and copied once into the tensors; the clocks the replies carry feed the
// SSP cache and the resume clock.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/parameter_wire.h"
#include "common/status_macros.h"
#include "worker/parameter_client.h"
#include "worker/parameter_client_internal.h"

namespace ps {
namespace {

using parameter_client_internal::Await;

// The row width the CTR jobs use (deploy/jobs/criteo-ctr.json): its rows
// are copied with a size known at compile time.
constexpr size_t kCommonDim = 16;

}  // namespace

// A pull in flight: its request and what the servers' replies carry. Per
// server, so the callbacks (one call per server at a time) never share.
struct PullInFlight {
  PullInFlight(const v1::PullRequest& message,
               std::vector<std::vector<SparsePart>> sparse_parts,
               size_t servers, const std::vector<std::vector<uint64_t>>& keys,
               const std::vector<size_t>& reply_bytes_bounds,
               const std::vector<bool>& names_place)
      : parts(std::move(sparse_parts)),
        slots(servers),
        min_clocks(servers, INT64_MAX),
        own_clocks(servers, INT64_MAX),
        reply_bytes(servers, 0) {
    parts.resize(servers);
    requests.reserve(servers);
    for (size_t s = 0; s < servers; ++s) {
      v1::PullRequest request = message;
      // A server hosting two places of the job answers by the place.
      if (names_place[s]) request.set_place(static_cast<int>(s));
      for (uint64_t key : keys[s]) request.add_keys(key);
      for (const SparsePart& part : parts[s]) {
        v1::SparseRows* rows = request.add_sparse();
        rows->set_table(part.table);
        rows->set_keys(reinterpret_cast<const char*>(part.ids.data()),
                       part.ids.size() * sizeof(uint64_t));
      }
      requests.emplace_back(std::move(request));
      requests.back().reply_bytes = reply_bytes_bounds[s];
    }
  }
  // Per server: the sparse rows asked of it, and its request.
  std::vector<std::vector<SparsePart>> parts;
  std::vector<PullRequestBytes> requests;
  std::vector<TransportSlot> slots;
  std::vector<int64_t> min_clocks;
  std::vector<int64_t> own_clocks;
  std::vector<int64_t> reply_bytes;
};

void ParameterClient::PullAsync(int64_t clock,
                                std::vector<std::vector<float>>* params,
                                Done done) {
  if (use_cache_ && cached_min_clock_ >= 0 &&
      clock <= cached_min_clock_ + staleness_) {
    ++pulls_saved_;
    *params = cache_;
    std::move(done)(absl::OkStatus());
    return;
  }
  ++pulls_made_;
  if (!parts_.empty()) {
    PullPartsAsync(clock, params, std::move(done));
    return;
  }
  PullFromServers(
      clock, params, /*final=*/false,
      [this, params, done = std::move(done)](absl::Status status) mutable {
        if (status.ok() && use_cache_) cache_ = *params;
        std::move(done)(std::move(status));
      });
}

absl::Status ParameterClient::Pull(int64_t clock,
                                   std::vector<std::vector<float>>* params) {
  return Await([&](Done done) { PullAsync(clock, params, std::move(done)); });
}

absl::Status ParameterClient::PullFinal(
    int64_t clock, std::vector<std::vector<float>>* params) {
  ++pulls_made_;
  return Await([&](Done done) {
    PullFromServers(clock, params, /*final=*/true, std::move(done));
  });
}

absl::Status ParameterClient::PullStep(int64_t clock, bool final,
                                       std::vector<std::vector<float>>* params,
                                       SparseStep* step) {
  ++pulls_made_;
  return Await([&](Done done) {
    PullFromServers(clock, params, final, std::move(done), step);
  });
}

void ParameterClient::PullStepAsync(int64_t clock,
                                    std::vector<std::vector<float>>* params,
                                    SparseStep* step, Done done) {
  ++pulls_made_;
  PullFromServers(clock, params, /*final=*/false, std::move(done), step);
}

absl::StatusOr<int64_t> ParameterClient::ResumeClock(bool warn) {
  // A read at clock 0 never waits and is always allowed.
  std::vector<std::vector<float>> params;
  PS_RETURN_IF_ERROR(Await([&](Done done) {
    PullFromServers(0, &params, /*final=*/false, std::move(done));
  }));
  cached_min_clock_ = -1;  // Do not serve later reads from this pull.
  if (warn && own_clock_max_ > own_clock_) {
    // The lost worker's push of clock own_clock_ reached some servers only,
    // and they may have applied it: the gradient computed again for the
    // others reads their newer values, so the run departs (slightly) from
    // one without the loss. Nothing acknowledged is lost.
    PS_LOG_WARNING("job ", job_id_, ": worker ", worker_index_,
                   "'s push of clock ", own_clock_,
                   " reached some servers only (server clocks ", own_clock_,
                   " to ", own_clock_max_, "): its gradient is computed again ",
                   "from values some servers have updated since");
  }
  return own_clock_;
}

void ParameterClient::PullFromServers(int64_t clock,
                                      std::vector<std::vector<float>>* params,
                                      bool final, Done done, SparseStep* step,
                                      const Part* part) {
  if (part == nullptr) {
    params->resize(tensors_.size());
    for (size_t t = 0; t < tensors_.size(); ++t) {
      (*params)[t].resize(tensors_[t].num_elems());
    }
  }
  absl::StatusOr<std::vector<std::vector<SparsePart>>> parts = RouteStep(step);
  if (!parts.ok()) {
    std::move(done)(parts.status());
    return;
  }
  if (step != nullptr) {
    step->rows.resize(step->ids.size());
    for (size_t t = 0; t < step->ids.size(); ++t) {
      step->rows[t].resize(step->ids[t].size() * router_.dim(t));
    }
  }
  v1::PullRequest request;
  request.set_job_id(job_id_);
  request.set_worker_index(worker_index_);
  request.set_clock(clock);
  request.set_map_version(map_version_);
  request.set_membership_version(membership_version_);
  request.set_final(final);
  std::vector<BlockSpan> spans(servers_.size());
  std::vector<std::vector<uint64_t>> keys(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    spans[s] = SpanOf(s, part);
    for (size_t b = spans[s].begin; part != nullptr && b < spans[s].end; ++b) {
      keys[s].push_back(servers_[s].blocks[b].key);
    }
  }
  std::vector<size_t> bounds(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    bounds[s] = PullReplyBytes(s, (*parts)[s]);
  }
  auto pull = std::make_shared<PullInFlight>(
      request, *std::move(parts), servers_.size(), keys, bounds, names_place_);
  AskAllServers(
      absl::StrCat(final ? "final pull of clock " : "pull of clock ", clock),
      options_.pull_timeout,
      // A final read waits for the slowest worker, for as long
      // as the job runs (its end stops or cancels the client).
      final ? absl::InfiniteDuration() : options_.retry_window,
      [this, pull, params, step, spans, partial = part != nullptr](
          int s, grpc::ClientContext* context,
          ServerFanout::CallDone call_done) {
        if (partial && spans[s].begin == spans[s].end) {
          call_done(absl::OkStatus());  // A part with no block here.
          return;
        }
        PullFrom(s, context, std::move(call_done), pull, params, step,
                 spans[s]);
      },
      [this, pull, whole = part == nullptr,
       done = std::move(done)](absl::Status status) mutable {
        pull->slots.clear();  // Gives back what the transports lent.
        if (status.ok()) {
          for (int64_t bytes : pull->reply_bytes) pulled_bytes_ += bytes;
        }
        // A part's pull (parts end on their own threads) leaves the clocks
        // the client keeps as they are.
        if (status.ok() && whole) KeepPullClocks(*pull);
        std::move(done)(std::move(status));
      });
}

void ParameterClient::PullFrom(int s, grpc::ClientContext* context,
                               ServerFanout::CallDone call_done,
                               std::shared_ptr<PullInFlight> pull,
                               std::vector<std::vector<float>>* params,
                               SparseStep* step, BlockSpan span) {
  // Read where the transport holds them and copied once, into the
  // tensors (common/parameter_wire.h).
  auto read = [this, s, pull, params, step,
               span](std::span<const std::string_view> reply) {
    return ReadPullReply(s, reply, params, &pull->min_clocks[s],
                         &pull->own_clocks[s], &pull->reply_bytes[s],
                         pull->parts[s], step, span);
  };
  CallServer(
      s, "pull from",
      [&](PayloadTransport& transport, PayloadTransport::Done done) {
        return transport.Pull(context, pull->requests[s], read, &pull->slots[s],
                              std::move(done));
      },
      std::move(call_done));
}

void ParameterClient::KeepPullClocks(const PullInFlight& pull) {
  const int64_t min_clock =
      *std::min_element(pull.min_clocks.begin(), pull.min_clocks.end());
  const int64_t own_clock =
      *std::min_element(pull.own_clocks.begin(), pull.own_clocks.end());
  cached_min_clock_ = min_clock;
  own_clock_ = own_clock == INT64_MAX ? 0 : own_clock;
  own_clock_max_ = own_clock_;
  for (int64_t c : pull.own_clocks) {
    if (c != INT64_MAX) own_clock_max_ = std::max(own_clock_max_, c);
  }
}

absl::Status ParameterClient::ReadPullReply(
    int s, std::span<const std::string_view> segments,
    std::vector<std::vector<float>>* params, int64_t* min_clock,
    int64_t* own_clock, int64_t* reply_bytes,
    const std::vector<SparsePart>& parts, SparseStep* step,
    BlockSpan span) const {
  *reply_bytes = 0;
  for (std::string_view segment : segments) {
    *reply_bytes += static_cast<int64_t>(segment.size());
  }
  absl::StatusOr<PullView> view = ParsePullResponse(segments);
  if (!view.ok()) {
    return absl::InternalError(
        absl::StrCat("pull reply: ", view.status().message()));
  }
  const Server& server = servers_[s];
  if (view->blocks.size() != span.end - span.begin) {
    return absl::InternalError(
        absl::StrCat("pull reply has ", view->blocks.size(),
                     " blocks, expected ", span.end - span.begin));
  }
  for (size_t i = 0; i < view->blocks.size(); ++i) {
    const BlockRef& ref = server.blocks[span.begin + i];
    const WireBlock& block = view->blocks[i];
    // FP32, or 16-bit values with the job's wire_parameters: decoded here.
    absl::Status copied =
        block.key != ref.key
            ? absl::InvalidArgumentError("another key")
            : CopyPulledValues(block.data, view->value_encoding,
                               static_cast<size_t>(ref.num_elems),
                               (*params)[ref.tensor].data() + ref.offset);
    if (!copied.ok()) {
      return absl::InternalError(
          absl::StrCat("pull reply block ", block.key,
                       " does not match: ", copied.message()));
    }
  }
  if (view->sparse.size() != parts.size()) {
    return absl::InternalError(
        absl::StrCat("pull reply has rows of ", view->sparse.size(),
                     " sparse tables, expected ", parts.size()));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const SparsePart& part = parts[i];
    const WireSparseRows& rows = view->sparse[i];
    const size_t dim = static_cast<size_t>(router_.dim(part.table));
    const size_t value_bytes = WireValueBytes(view->value_encoding);
    if (rows.table != part.table || value_bytes == 0 ||
        rows.values.size() != part.ids.size() * dim * value_bytes) {
      return absl::InternalError(absl::StrCat(
          "pull reply rows of sparse table ", rows.table, " do not match"));
    }
    // Value k of the reply is value k % dim of row positions[k / dim]:
    // copied a row (or the part of one in this run) at a time.
    float* out = step->rows[part.table].data();
    ForEachGradientRun(
        rows.values, view->value_encoding,
        [&](size_t first, std::span<const float> run) {
          for (size_t k = 0; k < run.size();) {
            const size_t at = first + k;
            const size_t column = at % dim;
            const size_t n = std::min(dim - column, run.size() - k);
            float* to = out + part.positions[at / dim] * dim + column;
            if (n == kCommonDim) {
              // A whole row of the common width: a copy of known size,
              // a few register moves instead of a call.
              std::memcpy(to, run.data() + k, kCommonDim * sizeof(float));
            } else {
              std::memcpy(to, run.data() + k, n * sizeof(float));
            }
            k += n;
          }
        });
  }
  *min_clock = view->min_clock;
  if (worker_index_ < static_cast<int>(view->worker_clocks.size())) {
    *own_clock = view->worker_clocks[worker_index_];
  }
  return absl::OkStatus();
}

}  // namespace ps

// ParameterClient: the push. Each server's request is the PushRequest wire
// format as slices: the framing bytes and the gradient blocks lent to gRPC
// in place (FP32) or from the client's 16-bit encoding buffer, and the
// sparse rows' gradients it holds.
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half_codec.h"
#include "common/parameter_wire.h"
#include "grpcpp/alarm.h"
#include "worker/parameter_client.h"
#include "worker/parameter_client_internal.h"

namespace ps {
namespace {

using parameter_client_internal::Await;

}  // namespace

// A push in flight: its requests, which lend the gradient memory to gRPC
// without a copy, and its outcome, held back until gRPC has released every
// slice lent (it may hold one briefly after the call it was sent on ends,
// e.g. until the transport's write finishes). Deletes itself once the
// outcome is delivered.
class PushInFlight {
 public:
  PushInFlight(size_t servers, ParameterClient::Done done)
      : requests(servers), slots(servers), done_(std::move(done)) {}
  PushInFlight(const PushInFlight&) = delete;
  PushInFlight& operator=(const PushInFlight&) = delete;

  // A slice over [data, data + size), which must stay valid until the
  // outcome is delivered.
  grpc::Slice Lend(const void* data, size_t size) {
    {
      absl::MutexLock lock(&mu_);
      ++lent_;
    }
    return grpc::Slice(const_cast<void*>(data), size, &PushInFlight::Release,
                       this);
  }

  // The calls ended with `status`: delivers it, now or once gRPC releases
  // the last slice, and deletes this.
  void CallsEnded(absl::Status status) {
    requests.clear();  // Our references (may release slices inline).
    slots.clear();     // Gives back what the transports lent.
    bool now;
    {
      absl::MutexLock lock(&mu_);
      status_ = std::move(status);
      ended_ = true;
      now = lent_ == 0;
    }
    if (now) DeliverAndDelete();
  }

  std::vector<grpc::ByteBuffer> requests;  // One per server.
  std::vector<TransportSlot> slots;        // One per server.
  // The sparse rows' fields lent to the requests (a deque: its strings
  // never move).
  std::deque<std::string> sparse_fields;

 private:
  static void Release(void* self) {
    auto* push = static_cast<PushInFlight*>(self);
    bool last;
    {
      absl::MutexLock lock(&push->mu_);
      last = --push->lent_ == 0 && push->ended_;
    }
    // The slice is released deep inside gRPC's transport: the outcome is
    // delivered from an alarm's callback instead, on a gRPC thread of its
    // own (it may start the next call or cancel others).
    if (last) {
      push->alarm_ = std::make_unique<grpc::Alarm>();
      push->alarm_->Set(std::chrono::system_clock::now(),
                        [push](bool) { push->DeliverAndDelete(); });
    }
  }

  void DeliverAndDelete() {
    std::move(done_)(std::move(status_));
    delete this;  // Safe in the alarm's callback: gRPC keeps its own ref.
  }

  ParameterClient::Done done_;
  absl::Mutex mu_;
  int lent_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_;  // Written before ended_, read after.
  std::unique_ptr<grpc::Alarm> alarm_;
};

namespace {

// The row width the CTR jobs use (deploy/jobs/criteo-ctr.json).
constexpr size_t kCommonDim = 16;

// The PushRequest.sparse entries of `parts`, their row gradients gathered
// from `step` (and encoded to 16 bits where `encoding` says).
absl::StatusOr<std::vector<std::string>> SparsePushFields(
    const std::vector<SparsePart>& parts, const SparseStep& step,
    const SparseRouter& router, v1::Precision encoding) {
  std::vector<std::string> fields;
  std::vector<float> values;
  std::vector<uint16_t> encoded;
  for (const SparsePart& part : parts) {
    const size_t dim = static_cast<size_t>(router.dim(part.table));
    const std::vector<float>& grads = step.row_grads[part.table];
    if (grads.size() != step.ids[part.table].size() * dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("push: row gradients of sparse table ", part.table,
                       " hold ", grads.size(), " values, expected ",
                       step.ids[part.table].size() * dim));
    }
    values.resize(part.ids.size() * dim);
    if (dim == kCommonDim) {
      // Rows of the common width: copies of known size, a few register
      // moves each instead of a call.
      for (size_t j = 0; j < part.ids.size(); ++j) {
        std::memcpy(values.data() + j * kCommonDim,
                    grads.data() + part.positions[j] * kCommonDim,
                    kCommonDim * sizeof(float));
      }
    } else {
      for (size_t j = 0; j < part.ids.size(); ++j) {
        std::memcpy(values.data() + j * dim,
                    grads.data() + part.positions[j] * dim,
                    dim * sizeof(float));
      }
    }
    std::string_view bytes(reinterpret_cast<const char*>(values.data()),
                           values.size() * sizeof(float));
    if (encoding != v1::FP32) {
      encoded.resize(values.size());
      if (encoding == v1::FP16) {
        EncodeFp16(values, encoded.data());
      } else {
        EncodeBf16(values, encoded.data());
      }
      bytes = {reinterpret_cast<const char*>(encoded.data()),
               encoded.size() * sizeof(uint16_t)};
    }
    fields.push_back(PushFramer::SparseRowsField(
        part.table,
        {reinterpret_cast<const char*>(part.ids.data()),
         part.ids.size() * sizeof(uint64_t)},
        bytes));
  }
  return fields;
}

}  // namespace

absl::Status ParameterClient::Push(
    int64_t clock, const std::vector<std::vector<float>>& grads) {
  return Await([&](Done done) { PushAsync(clock, &grads, std::move(done)); });
}

void ParameterClient::PushAsync(int64_t clock,
                                const std::vector<std::vector<float>>* grads,
                                Done done) {
  if (!parts_.empty()) {
    PushPartsAsync(clock, grads, std::move(done));
    return;
  }
  PushWithRows(clock, grads, nullptr, std::move(done));
}

absl::Status ParameterClient::PushStep(
    int64_t clock, const std::vector<std::vector<float>>& grads,
    const SparseStep& step) {
  return Await(
      [&](Done done) { PushWithRows(clock, &grads, &step, std::move(done)); });
}

void ParameterClient::PushStepAsync(
    int64_t clock, const std::vector<std::vector<float>>* grads,
    const SparseStep* step, Done done) {
  PushWithRows(clock, grads, step, std::move(done));
}

absl::Status ParameterClient::CheckAndEncode(
    const std::vector<std::vector<float>>& grads) {
  if (grads.size() != tensors_.size()) {
    return absl::InvalidArgumentError("push: one gradient per tensor required");
  }
  for (size_t t = 0; t < grads.size(); ++t) {
    if (static_cast<int64_t>(grads[t].size()) != tensors_[t].num_elems()) {
      return absl::InvalidArgumentError(
          absl::StrCat("push: gradient of tensor ", t, " has ", grads[t].size(),
                       " values, the tensor ", tensors_[t].num_elems()));
    }
  }
  // 16-bit wire gradients: encoded once into this client's push buffer (the
  // previous push's slices were all released before it was reported).
  if (wire_gradients_ != v1::FP32) {
    for (size_t t = 0; t < grads.size(); ++t) {
      if (wire_gradients_ == v1::FP16) {
        EncodeFp16(grads[t], push_encoded_[t].data());
      } else {
        EncodeBf16(grads[t], push_encoded_[t].data());
      }
    }
  }
  return absl::OkStatus();
}

void ParameterClient::PushWithRows(
    int64_t clock, const std::vector<std::vector<float>>* grads_in,
    const SparseStep* step, Done done, const Part* part) {
  const std::vector<std::vector<float>>& grads = *grads_in;
  absl::StatusOr<std::vector<std::vector<SparsePart>>> parts = RouteStep(step);
  if (!parts.ok()) {
    std::move(done)(parts.status());
    return;
  }
  if (step != nullptr && step->row_grads.size() != step->ids.size()) {
    std::move(done)(absl::InvalidArgumentError(
        "push: one row-gradient vector per sparse table required"));
    return;
  }
  if (part == nullptr) {
    if (absl::Status checked = CheckAndEncode(grads); !checked.ok()) {
      std::move(done)(std::move(checked));
      return;
    }
  }
  const bool encoded = wire_gradients_ != v1::FP32;
  const size_t value_bytes = WireValueBytes(wire_gradients_);
  // Each server's request is the PushRequest wire format as slices: the
  // framing bytes (small, copied) and the gradient blocks in place.
  auto* push = new PushInFlight(servers_.size(), std::move(done));
  const PushFramer framer(job_id_, worker_index_, clock, map_version_,
                          wire_gradients_, membership_version_);
  for (size_t s = 0; s < servers_.size(); ++s) {
    const BlockSpan span = SpanOf(s, part);
    // A part with no block on this server: no call (the request stays
    // invalid).
    if (part != nullptr && span.begin == span.end) continue;
    std::vector<grpc::Slice> slices;
    slices.reserve(2 + 2 * (span.end - span.begin));
    slices.emplace_back(framer.Header());
    for (size_t b = span.begin; b < span.end; ++b) {
      const BlockRef& ref = servers_[s].blocks[b];
      const void* data =
          encoded
              ? static_cast<const void*>(push_encoded_[ref.tensor].data() +
                                         ref.offset)
              : static_cast<const void*>(grads[ref.tensor].data() + ref.offset);
      const size_t bytes = ref.num_elems * value_bytes;
      slices.emplace_back(PushFramer::BlockPrefix(ref.key, bytes));
      slices.push_back(push->Lend(data, bytes));
    }
    if (!framer.Trailer().empty()) slices.emplace_back(framer.Trailer());
    if (!(*parts)[s].empty()) {
      absl::StatusOr<std::vector<std::string>> fields =
          SparsePushFields((*parts)[s], *step, router_, wire_gradients_);
      if (!fields.ok()) {
        push->CallsEnded(fields.status());
        return;
      }
      // Lent, not copied again: the push keeps them until gRPC lets go.
      for (std::string& field : *fields) {
        const std::string& kept =
            push->sparse_fields.emplace_back(std::move(field));
        slices.push_back(push->Lend(kept.data(), kept.size()));
      }
    }
    if (!framer.Ending().empty()) slices.emplace_back(framer.Ending());
    // The place, where a server hosts two places of the job: it answers by
    // it.
    if (names_place_[s]) {
      slices.emplace_back(PushFramer::PlaceField(static_cast<int32_t>(s)));
    }
    push->requests[s] = grpc::ByteBuffer(slices.data(), slices.size());
  }
  SendPush(clock, push);
}

void ParameterClient::SendPush(int64_t clock, PushInFlight* push) {
  AskAllServers(
      absl::StrCat("push of clock ", clock), options_.push_timeout,
      options_.retry_window,
      [this, push](int s, grpc::ClientContext* context,
                   ServerFanout::CallDone call_done) {
        if (!push->requests[s].Valid()) {
          call_done(absl::OkStatus());  // A part with no block here.
          return;
        }
        // The request's bytes, however they travel.
        pushed_bytes_.fetch_add(push->requests[s].Length(),
                                std::memory_order_relaxed);
        CallServer(
            s, "push to",
            [&](PayloadTransport& transport, PayloadTransport::Done done) {
              return transport.Push(context, push->requests[s], &push->slots[s],
                                    std::move(done));
            },
            std::move(call_done));
      },
      [push](absl::Status status) { push->CallsEnded(std::move(status)); });
}

}  // namespace ps

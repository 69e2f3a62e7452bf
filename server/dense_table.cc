#include "server/dense_table.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/gradient_apply.h"

namespace ps {
namespace {

std::string_view BytesOf(std::span<const float> values) {
  return {reinterpret_cast<const char*>(values.data()),
          values.size() * sizeof(float)};
}

// A module buffer's update: values += the pushed change (decoded from
// `encoding`), whatever the kind of record, so that the live path and replay
// give the same bits.
void AddPushedChange(const WireBytes& data, v1::Precision encoding,
                     std::span<float> values) {
  ForEachGradientRun(data, encoding,
                     [values](size_t first, std::span<const float> change) {
                       float* __restrict v = values.data() + first;
                       for (size_t j = 0; j < change.size(); ++j) {
                         v[j] += change[j];
                       }
                     });
}

// sum[j] += g[j] (add), or sum[j] = 0.0f + g[j] (the first push of a
// clock: the bits of adding g to zeros), 16 floats at a time (see
// ScaleInPlace).
void AddInto(float* __restrict sum, std::span<const float> g, bool add) {
  constexpr size_t kRun = 16;
  const float* __restrict in = g.data();
  const size_t n = g.size();
  size_t i = 0;
  if (add) {
    for (; i + kRun <= n; i += kRun) {
      for (size_t j = i; j < i + kRun; ++j) sum[j] += in[j];
    }
    for (; i < n; ++i) sum[i] += in[i];
    return;
  }
  for (; i + kRun <= n; i += kRun) {
    for (size_t j = i; j < i + kRun; ++j) sum[j] = 0.0f + in[j];
  }
  for (; i < n; ++i) sum[i] = 0.0f + in[i];
}

// values *= scale, 16 floats at a time: a fixed trip count is what GCC's
// -O2 vectorises (server/optimizer_internal.h), one float at a time it took
// 3 % of a server's CPU on the README job. The same bits either way.
void ScaleInPlace(std::span<float> values, float scale) {
  constexpr size_t kRun = 16;
  float* __restrict v = values.data();
  const size_t n = values.size();
  size_t i = 0;
  for (; i + kRun <= n; i += kRun) {
    for (size_t j = i; j < i + kRun; ++j) v[j] *= scale;
  }
  for (; i < n; ++i) v[i] *= scale;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DenseTable>> DenseTable::Create(
    const v1::Assignment& assignment, const std::vector<TensorSpec>& tensors,
    const Optimizer* optimizer, bool accumulate) {
  const int me = assignment.index();
  const v1::JobSpec& spec = assignment.spec();
  absl::flat_hash_map<uint64_t, int> placement;
  for (const auto& p : assignment.shard_map().blocks()) {
    placement[p.key()] = p.server();
  }
  std::unique_ptr<DenseTable> table(new DenseTable(optimizer));
  for (const BlockSpec& b : SplitIntoBlocks(tensors, spec.block_elems())) {
    auto it = placement.find(b.key);
    if (it == placement.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard_map: block ", b.key, " has no server"));
    }
    if (it->second != me) continue;
    const TensorSpec& tensor = tensors[b.tensor_index];
    Block block;
    block.spec = b;
    block.from_worker = tensor.init == InitKind::kFromWorker;
    block.buffer = tensor.buffer;
    block.values = InitialBlockValues(tensor, b, spec.seed());
    if (!block.buffer) {
      block.state.assign(b.num_elems * optimizer->state_slots(), 0.0f);
    }
    if (accumulate) block.accum.assign(b.num_elems, 0.0f);
    table->num_seedable_ += block.from_worker ? 1 : 0;
    table->index_[b.key] = table->blocks_.size();
    table->blocks_.push_back(std::move(block));
  }
  return table;
}

absl::Status DenseTable::ResolvePullKeys(
    const google::protobuf::RepeatedField<uint64_t>& keys,
    std::vector<uint64_t>* out) const {
  out->clear();
  if (keys.empty()) {
    for (const Block& b : blocks_) out->push_back(b.spec.key);  // Key order.
    return absl::OkStatus();
  }
  if (keys.size() > static_cast<int>(index_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: ", keys.size(), " keys, but this server holds ",
                     index_.size(), " blocks of the job"));
  }
  absl::flat_hash_set<uint64_t> seen;
  for (uint64_t key : keys) {
    if (!index_.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys: block ", key, " is not held by this server"));
    }
    // A repeated key would repeat its block in the reply.
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys: block ", key, " appears twice"));
    }
    out->push_back(key);
  }
  return absl::OkStatus();
}

PushCheck DenseTable::CheckPush(const PushView& request) const {
  PushCheck check;
  const size_t value_bytes = WireValueBytes(request.gradient_encoding);
  if (value_bytes == 0) {
    check.invalid = absl::InvalidArgumentError(absl::StrCat(
        "gradient_encoding: ", static_cast<int>(request.gradient_encoding),
        " is not an encoding (FP32, FP16 or BF16)"));
    return check;
  }
  check.positions.reserve(request.gradients.size());
  absl::flat_hash_set<uint64_t> seen;
  for (const WireBlock& g : request.gradients) {
    auto it = index_.find(g.key);
    if (it == index_.end()) {
      check.invalid = absl::InvalidArgumentError(absl::StrCat(
          "gradients: block ", g.key, " is not held by this server"));
      return check;
    }
    if (!seen.insert(g.key).second) {
      check.invalid = absl::InvalidArgumentError(
          absl::StrCat("gradients: block ", g.key, " appears twice"));
      return check;
    }
    const int64_t expected = blocks_[it->second].spec.num_elems;
    if (g.data.size() != static_cast<size_t>(expected) * value_bytes) {
      check.invalid = absl::InvalidArgumentError(absl::StrCat(
          "gradients: block ", g.key, " has ", g.data.size(),
          " bytes, expected ", expected * value_bytes, " (", expected,
          " values in ", v1::Precision_Name(request.gradient_encoding), ")"));
      return check;
    }
    check.positions.push_back(it->second);
  }
  // Every block before any is applied: a NaN anywhere refuses the whole push
  // unchanged (NON_FINITE_REFUSE), or drops all of its gradient here
  // (NON_FINITE_DROP).
  for (const WireBlock& g : request.gradients) {
    if (!AllFinite(g.data, request.gradient_encoding)) {
      check.finite = false;
      check.non_finite_key = g.key;
      break;
    }
  }
  return check;
}

WireMessage DenseTable::EncodeReply(std::span<const uint64_t> keys,
                                    int64_t min_clock,
                                    std::span<const int64_t> clocks,
                                    WireBufferPool* pool,
                                    const ReplyAllocator& allocate,
                                    std::span<const ReplyRows> sparse,
                                    v1::Precision encoding) const {
  std::vector<ReplyBlock> blocks;
  blocks.reserve(keys.size());
  for (uint64_t key : keys) {
    blocks.push_back({key, blocks_[index_.at(key)].values});
  }
  return EncodePullResponse(blocks, min_clock, clocks, pool, allocate, sparse,
                            encoding);
}

void DenseTable::Accumulate(const PushView& request, const PushCheck& check) {
  for (size_t i = 0; i < check.positions.size(); ++i) {
    Block& b = blocks_[check.positions[i]];
    float* acc = b.accum.data();
    // The clock's first push writes the sum without reading it: 0.0f + g
    // (not g itself, which would keep a -0.0 that adding to zeros makes
    // +0.0).
    const bool add = !b.accum_zero;
    ForEachGradientRun(request.gradients[i].data, request.gradient_encoding,
                       [acc, add](size_t first, std::span<const float> g) {
                         AddInto(acc + first, g, add);
                       });
    b.accum_zero = false;
  }
}

void DenseTable::ZeroUntouchedSum(Block& b) {
  if (!b.accum_zero) return;
  // No push added to this block this clock (all dropped, or a membership
  // change ended the clock): its sum is zeros.
  std::fill(b.accum.begin(), b.accum.end(), 0.0f);
  b.accum_zero = false;
}

TableUpdate DenseTable::AveragedUpdate(int num_workers, int64_t clock) {
  TableUpdate update;
  update.kind = storage::v1::UpdateRecord::BSP_CLOCK;
  update.clock = clock;
  update.blocks.reserve(blocks_.size());
  const float scale = 1.0f / static_cast<float>(num_workers);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = blocks_[i];
    ZeroUntouchedSum(b);
    ScaleInPlace(b.accum, scale);
    update.blocks.push_back({.key = b.spec.key,
                             .position = i,
                             .data = WireBytes(BytesOf(b.accum))});
  }
  return update;
}

void DenseTable::ClearAccumulated() {
  for (Block& b : blocks_) b.accum_zero = true;
}

TableUpdate DenseTable::AveragedBlocks(int num_workers, int64_t clock,
                                       std::span<const size_t> positions) {
  TableUpdate update;
  update.kind = storage::v1::UpdateRecord::BSP_BLOCKS;
  update.clock = clock;
  update.blocks.reserve(positions.size());
  const float scale = 1.0f / static_cast<float>(num_workers);
  for (size_t i : positions) {
    Block& b = blocks_[i];
    ZeroUntouchedSum(b);
    ScaleInPlace(b.accum, scale);
    update.blocks.push_back({.key = b.spec.key,
                             .position = i,
                             .data = WireBytes(BytesOf(b.accum))});
  }
  return update;
}

void DenseTable::ClearAccumulated(std::span<const size_t> positions) {
  for (size_t i : positions) blocks_[i].accum_zero = true;
}

absl::StatusOr<TableUpdate> DenseTable::UpdateOfRecord(
    const storage::v1::UpdateRecord& record) const {
  using storage::v1::UpdateRecord;
  TableUpdate update;
  update.kind = record.kind();
  update.encoding = static_cast<v1::Precision>(record.gradient_encoding());
  update.applied = record.kind() != UpdateRecord::PUSH || record.applied();
  update.clock = record.clock();
  const bool whole_values = update.kind != UpdateRecord::PUSH;
  const size_t value_bytes =
      whole_values ? sizeof(float) : WireValueBytes(update.encoding);
  if (value_bytes == 0 || (whole_values && update.encoding != v1::FP32)) {
    return absl::DataLossError("has no valid gradient encoding");
  }
  if (update.kind == UpdateRecord::BSP_CLOCK &&
      record.blocks_size() != static_cast<int>(blocks_.size())) {
    return absl::DataLossError(absl::StrCat("updates ", record.blocks_size(),
                                            " of ", blocks_.size(), " blocks"));
  }
  for (const UpdateRecord::Block& g : record.blocks()) {
    auto it = index_.find(g.key());
    if (it == index_.end() ||
        g.data().size() !=
            static_cast<size_t>(blocks_[it->second].spec.num_elems) *
                value_bytes) {
      return absl::DataLossError(
          absl::StrCat("has block ", g.key(), " of ", g.data().size(),
                       " bytes, which this server does not hold"));
    }
    update.blocks.push_back(
        {.key = g.key(), .position = it->second, .data = WireBytes(g.data())});
  }
  return update;
}

void DenseTable::Apply(const TableUpdate& update, float learning_rate) {
  if (!update.applied) return;
  for (const TableUpdate::Block& u : update.blocks) {
    Block& b = blocks_[u.position];
    if (update.kind == storage::v1::UpdateRecord::SEED) {
      char* out = reinterpret_cast<char*>(b.values.data());
      for (std::string_view piece : u.data.pieces()) {
        std::memcpy(out, piece.data(), piece.size());
        out += piece.size();
      }
      continue;
    }
    if (b.buffer) {
      AddPushedChange(u.data, update.encoding, b.values);
      continue;
    }
    ApplyPushedGradient(*optimizer_, u.data, update.encoding, b.values, b.state,
                        &b.step, learning_rate);
  }
}

bool DenseTable::seeded() const {
  if (seeded_) return true;
  for (const Block& b : blocks_) {
    if (IsUnseeded(b.values)) return false;
  }
  seeded_ = true;
  return true;
}

absl::StatusOr<TableUpdate> DenseTable::SeedUpdate(
    const v1::SeedRequest& request) const {
  const size_t seedable = num_seedable_;
  if (request.blocks_size() != static_cast<int>(seedable)) {
    return absl::InvalidArgumentError(
        absl::StrCat("blocks: ", request.blocks_size(),
                     " blocks, but this server holds ", seedable,
                     " blocks of FROM_WORKER tensors; send all of them "
                     "at once"));
  }
  TableUpdate update;
  update.kind = storage::v1::UpdateRecord::SEED;
  absl::flat_hash_set<uint64_t> seen;
  for (const v1::Block& block : request.blocks()) {
    auto it = index_.find(block.key());
    if (it == index_.end() || !blocks_[it->second].from_worker) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blocks: block ", block.key(),
          " is not a block of a FROM_WORKER tensor held by this server"));
    }
    if (!seen.insert(block.key()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("blocks: block ", block.key(), " appears twice"));
    }
    const size_t n = blocks_[it->second].values.size();
    if (block.data().size() != n * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blocks: block ", block.key(), " has ", block.data().size(),
          " bytes, expected ", n * sizeof(float), " (", n, " float32 values)"));
    }
    if (!AllFinite(WireBytes(block.data()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("blocks: block ", block.key(), " contains NaN or Inf"));
    }
    update.blocks.push_back({.key = block.key(),
                             .position = it->second,
                             .data = WireBytes(block.data())});
  }
  return update;
}

std::vector<StoredBlock> DenseTable::Snapshot() const {
  std::vector<StoredBlock> blocks;
  blocks.reserve(blocks_.size());
  for (const Block& b : blocks_) {
    blocks.push_back({.key = b.spec.key,
                      .values = b.values,
                      .optimizer_state = b.state,
                      .optimizer_step = b.step});
  }
  return blocks;
}

absl::Status DenseTable::Restore(std::vector<StoredBlock> stored) {
  if (stored.size() != blocks_.size()) {
    return absl::DataLossError(absl::StrCat(
        "store holds ", stored.size(),
        " blocks, the shard map gives this server ", blocks_.size()));
  }
  for (StoredBlock& s : stored) {
    auto it = index_.find(s.key);
    if (it == index_.end()) {
      return absl::DataLossError(
          absl::StrCat("stored block ", s.key, " is not in the shard map"));
    }
    Block& b = blocks_[it->second];
    if (s.values.size() != b.values.size() ||
        s.optimizer_state.size() != b.state.size()) {
      return absl::DataLossError(
          absl::StrCat("stored block ", s.key, " has the wrong size"));
    }
    if (s.optimizer_step < 0) {
      return absl::DataLossError(
          absl::StrCat("stored block ", s.key, " has a negative step"));
    }
    b.values = std::move(s.values);
    b.state = std::move(s.optimizer_state);
    b.step = s.optimizer_step;
  }
  return absl::OkStatus();
}

}  // namespace ps

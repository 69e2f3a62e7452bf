#include "server/sparse_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/sparse_memory.h"
#include "common/status_macros.h"
#include "server/sort_by_key.h"
#include "server/sparse_bucket_codec.h"

namespace ps {
namespace {

constexpr int kMaxDim = 1024;

absl::Status ValidateSpec(const v1::SparseTableSpec& spec) {
  if (spec.dim() < 1 || spec.dim() > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim must be 1 to 1024, got ", spec.dim()));
  }
  const int32_t buckets = spec.num_buckets();
  if (buckets < 1 || buckets > kMaxBucketsPerTable ||
      (buckets & (buckets - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_buckets must be a power of two, 1 to 2^20, got ", buckets));
  }
  const v1::AdmissionSpec& admission = spec.admission();
  if (admission.min_count() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "admission.min_count must be >= 0, got ", admission.min_count()));
  }
  const float p = admission.probability();
  if (!(p >= 0 && p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("admission.probability must be in [0, 1], got ", p));
  }
  if (p > 0 && admission.min_count() > 1) {
    return absl::InvalidArgumentError(
        "admission: set at most one of min_count and probability");
  }
  const v1::EvictionSpec& eviction = spec.eviction();
  if (eviction.max_idle_clocks() < 0 || eviction.max_rows_per_server() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eviction.max_idle_clocks and max_rows_per_server must be >= 0, got ",
        eviction.max_idle_clocks(), " and ", eviction.max_rows_per_server()));
  }
  return absl::OkStatus();
}

absl::Status WithTable(const absl::Status& status,
                       const v1::SparseTableSpec& spec) {
  return absl::Status(status.code(), absl::StrCat("sparse table ", spec.name(),
                                                  ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(
    const v1::SparseTableSpec& spec, uint32_t table_index, uint64_t job_seed,
    bool accumulate, const SparseTableMemory& memory) {
  if (absl::Status status = ValidateSpec(spec); !status.ok()) {
    return WithTable(status, spec);
  }
  absl::StatusOr<SparseRowInit> init =
      SparseRowInit::Create(spec.init(), spec.dim(), job_seed, table_index);
  if (!init.ok()) return WithTable(init.status(), spec);
  absl::StatusOr<SparseOptimizer> optimizer =
      SparseOptimizer::Create(spec.optimizer(), spec.dim());
  if (!optimizer.ok()) return WithTable(optimizer.status(), spec);
  return std::unique_ptr<SparseTable>(new SparseTable(
      spec, table_index, job_seed, accumulate, *init, *optimizer, memory));
}

SparseTable::SparseTable(const v1::SparseTableSpec& spec, uint32_t table_index,
                         uint64_t job_seed, bool accumulate, SparseRowInit init,
                         SparseOptimizer optimizer,
                         const SparseTableMemory& memory)
    : table_index_(table_index),
      dim_(spec.dim()),
      num_buckets_(static_cast<uint32_t>(spec.num_buckets())),
      accumulate_(accumulate),
      init_(std::move(init)),
      optimizer_(optimizer),
      state_floats_(optimizer.state_floats()),
      job_seed_(job_seed),
      min_count_(spec.admission().min_count()),
      probability_(spec.admission().probability()),
      max_idle_clocks_(spec.eviction().max_idle_clocks()),
      max_rows_(spec.eviction().max_rows_per_server()),
      lfu_(spec.eviction().policy() == v1::EvictionSpec::LFU),
      tier_(memory.tier),
      slots_(memory.pages),
      chunk_arena_(memory.pages),
      held_(num_buckets_, false) {
  if (tier_ == nullptr) return;
  // The tier keys the table's rows by bucket: a snapshot streams them in
  // its own order (docs/sparse.md, "Snapshots of a tiered table").
  tier_->SetBuckets(table_index_, num_buckets_);
  cold_in_bucket_.assign(num_buckets_, 0);
  // The whole plan is allocated as rows arrive, never more: the index and
  // the free list reserved now, the chunks one by one up to max_hot_.
  const SparseHotPlan plan =
      PlanSparseHotRows(memory.cap_bytes, SparseSlotBytes(dim_, state_floats_));
  max_hot_ = plan.hot_rows;
  chunk_log2_ = static_cast<uint32_t>(plan.chunk_log2);
  chunk_mask_ = (uint32_t{1} << chunk_log2_) - 1;
  if (max_hot_ > 0) {
    slots_.reserve(static_cast<size_t>((max_hot_ * 32 + 24) / 25 + 1));
    free_slots_.reserve(static_cast<size_t>(max_hot_));
  }
}

float* SparseTable::RowAt(uint32_t slot) {
  return chunks_[slot >> chunk_log2_].get() +
         (slot & chunk_mask_) * slot_floats() + kMetaFloats;
}

const float* SparseTable::RowAt(uint32_t slot) const {
  return chunks_[slot >> chunk_log2_].get() +
         (slot & chunk_mask_) * slot_floats() + kMetaFloats;
}

SparseTable::RowMeta SparseTable::Meta(uint32_t slot) const {
  RowMeta meta;
  std::memcpy(static_cast<void*>(&meta), RowAt(slot) - kMetaFloats,
              sizeof(meta));
  return meta;
}

void SparseTable::SetMeta(uint32_t slot, const RowMeta& meta) {
  std::memcpy(RowAt(slot) - kMetaFloats, &meta, sizeof(meta));
}

void SparseTable::MarkHeld(uint64_t id) {
  held_[BucketOfId(id, table_index_, num_buckets_)] = true;
}

void SparseTable::Read(std::span<const uint64_t> keys, float* out) const {
  if (tier_ != nullptr) {
    ReadTiered(keys, out, nullptr);
    return;
  }
  const size_t dim = static_cast<size_t>(dim_);
  // A pipeline over a large table: the index entry of key i + 2 * kAhead and
  // the row of key i + kAhead are fetched while row i is copied.
  constexpr size_t kAhead = 8;
  uint32_t ahead[kAhead];
  const auto look_up = [this, keys](size_t j) {
    if (j + kAhead < keys.size()) slots_.prefetch(keys[j + kAhead]);
    auto it = slots_.find(keys[j]);
    if (it == slots_.end()) return kNoSlot;
    __builtin_prefetch(RowAt(it->slot));
    return it->slot;
  };
  for (size_t j = 0; j < kAhead && j < keys.size(); ++j) ahead[j] = look_up(j);
  for (size_t i = 0; i < keys.size(); ++i) {
    float* row = out + i * dim;
    const uint32_t slot = ahead[i % kAhead];
    if (i + kAhead < keys.size()) ahead[i % kAhead] = look_up(i + kAhead);
    if (slot != kNoSlot) {
      std::memcpy(row, RowAt(slot), dim * sizeof(float));
    } else if (unconditional_admission()) {
      init_.Fill(keys[i], std::span<float>(row, dim));
    } else {
      std::fill(row, row + dim, 0.0f);
    }
  }
}

void SparseTable::Accumulate(std::span<const uint64_t> keys,
                             std::span<const float> grads) {
  PS_CHECK(accumulate_, "sparse table: Accumulate without accumulate");
  const size_t dim = static_cast<size_t>(dim_);
  PS_CHECK(grads.size() == keys.size() * dim, "sparse table: ", grads.size(),
           " gradient floats for ", keys.size(), " rows of dim ", dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, inserted] = acc_index_.try_emplace(
        keys[i], static_cast<uint32_t>(acc_keys_.size()));
    const float* g = grads.data() + i * dim;
    if (inserted) {
      acc_keys_.push_back(keys[i]);
      const size_t end = acc_keys_.size() * dim;
      if (acc_sums_.size() < end) {
        acc_sums_.resize(std::max(end, 2 * acc_sums_.size()));
      }
      // A first sum, 0 + g (which makes a -0 +0), without zeroing first.
      float* sum = acc_sums_.data() + (end - dim);
      for (size_t j = 0; j < dim; ++j) sum[j] = 0.0f + g[j];
      continue;
    }
    float* sum = acc_sums_.data() + size_t{it->second} * dim;
    for (size_t j = 0; j < dim; ++j) sum[j] += g[j];
  }
}

void SparseTable::AveragedRowsInto(int num_workers, std::vector<uint64_t>* keys,
                                   std::vector<float>* values) {
  PS_CHECK(num_workers >= 1, "sparse table: num_workers ", num_workers);
  const size_t dim = static_cast<size_t>(dim_);
  // (key, index) pairs sorted in place: no indirection in the comparisons.
  order_.resize(acc_keys_.size());
  for (size_t i = 0; i < order_.size(); ++i) {
    order_[i] = {acc_keys_[i], static_cast<uint32_t>(i)};
  }
  SortByKey(
      order_.data(), order_.data() + order_.size(),
      [](const std::pair<uint64_t, uint32_t>& e) { return e.first; },
      &order_scratch_, &order_count_);
  keys->resize(order_.size());
  values->resize(order_.size() * dim);
  const auto n = static_cast<float>(num_workers);
  for (size_t i = 0; i < order_.size(); ++i) {
    (*keys)[i] = order_[i].first;
    const float* sum = acc_sums_.data() + size_t{order_[i].second} * dim;
    float* avg = values->data() + i * dim;
    for (size_t j = 0; j < dim; ++j) avg[j] = sum[j] / n;
  }
}

SparseTable::RowsView SparseTable::AveragedRows(int num_workers) {
  AveragedRowsInto(num_workers, &avg_keys_, &avg_values_);
  return RowsView{.keys = avg_keys_, .values = avg_values_};
}

void SparseTable::ClearAccumulated() {
  // absl's clear() frees a large array: reserve what this clock used, so
  // that the next clock's sums do not grow the index step by step.
  const size_t used = acc_keys_.size();
  acc_index_.clear();
  if (used > 0) acc_index_.reserve(used);
  acc_keys_.clear();  // acc_sums_ keeps its floats: room for the next.
}

bool SparseTable::Admit(uint64_t id, int64_t clock) {
  if (probability_ > 0) {
    return SparseAdmissionDraw(job_seed_, table_index_, id, clock,
                               probability_);
  }
  if (min_count_ <= 1) return true;
  auto it = pending_.try_emplace(id, 0).first;
  if (++it->second < min_count_) return false;
  pending_.erase(it);
  return true;
}

uint32_t SparseTable::AllocateSlot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  if (tier_ != nullptr && next_slot_ >= max_hot_) return kNoSlot;
  const uint32_t slot = next_slot_++;
  if ((slot >> chunk_log2_) >= chunks_.size()) {
    const size_t rows = size_t{chunk_mask_} + 1;
    const size_t floats = rows * slot_floats();
    if (tier_ == nullptr && chunks_.size() >= kSmallChunks) {
      chunks_.emplace_back(chunk_arena_.Allocate(floats),
                           ChunkDelete{.arena = true});
    } else {
      chunks_.emplace_back(new float[floats](), ChunkDelete{});
    }
    if (tier_ != nullptr) {
      info_.push_back(std::make_unique<uint64_t[]>(2 * rows));
      for (size_t i = 0; i < rows; ++i) info_.back()[rows + i] = kFreeTick;
    }
  }
  return slot;
}

void SparseTable::InitRow(uint32_t slot, uint64_t id, int64_t clock) {
  float* row = RowAt(slot);
  init_.Fill(id, std::span<float>(row, static_cast<size_t>(dim_)));
  std::fill(row + dim_, row + stride(), 0.0f);
  SetMeta(slot, {.clock = clock, .updates = 0});
}

uint32_t SparseTable::NewRow(uint64_t id, int64_t clock) {
  const uint32_t slot = tier_ != nullptr ? TakeSlot() : AllocateSlot();
  if (slot == kNoSlot) return kNoSlot;  // Tier: memory full and pinned.
  InitRow(slot, id, clock);
  slots_.emplace(id, slot);
  if (tier_ != nullptr) {
    SlotId(slot) = id;
    SlotTick(slot) = tick_;
  }
  return slot;
}

void SparseTable::Evict(uint64_t id) {
  ++evictions_;
  MarkHeld(id);
  auto it = slots_.find(id);
  if (it == slots_.end()) {  // A cold row (LiveCandidatesTiered found it).
    TierDelete(id);
    CountCold(id, -1);
    return;
  }
  if (tier_ != nullptr) {
    SlotTick(it->slot) = kFreeTick;
    // A copy the tier may keep from before its promotion goes too.
    if (MaybeCold(id)) TierDelete(id);
  }
  free_slots_.push_back(it->slot);
  slots_.erase(it);
}

void SparseTable::Track(uint64_t id, const RowMeta& meta) {
  if (max_idle_clocks_ > 0 || (max_rows_ > 0 && !lfu_)) {
    by_clock_[{0, meta.clock}].push_back(id);
    ++order_entries_;
  }
  if (max_rows_ > 0 && lfu_) {
    by_count_[{meta.updates, meta.clock}].push_back(id);
    ++order_entries_;
  }
}

void SparseTable::Apply(std::span<const uint64_t> keys,
                        std::span<const float> grads, int64_t clock,
                        float lr_factor) {
  const size_t dim = static_cast<size_t>(dim_);
  PS_CHECK(grads.size() == keys.size() * dim, "sparse table: ", grads.size(),
           " gradient floats for ", keys.size(), " rows of dim ", dim);
  if (tier_ != nullptr) {
    ApplyTiered(keys, grads, clock, lr_factor);
    return;
  }
  // Two passes, for memory-level parallelism over a large table: the keys'
  // slots, then the steps in key order, fetching rows ahead. The first pass
  // probes the index once per key: an id without a row is admitted (or not)
  // there and its row made (a repeated id finds the row made for its first
  // occurrence), in key order as the steps would meet them. Slots found
  // stay valid: nothing is evicted before the steps end.
  constexpr size_t kAhead = 8;
  found_.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size()) slots_.prefetch(keys[i + kAhead]);
    const uint64_t id = keys[i];
    auto [it, inserted] = slots_.try_emplace(id, kNoSlot);
    if (!inserted) {
      found_[i] = it->slot;
    } else if (Admit(id, clock)) {
      const uint32_t slot = AllocateSlot();
      InitRow(slot, id, clock);
      it->slot = slot;
      found_[i] = slot;
      ++admissions_;
    } else {
      slots_.erase(it);
      found_[i] = kNoSlot;
      ++rejections_;
    }
  }
  const bool tracked = max_idle_clocks_ > 0 || max_rows_ > 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size() && found_[i + kAhead] != kNoSlot) {
      const float* ahead = RowAt(found_[i + kAhead]) - kMetaFloats;
      __builtin_prefetch(ahead, 1);
      __builtin_prefetch(ahead + slot_floats() - 1, 1);
    }
    const uint64_t id = keys[i];
    const uint32_t slot = found_[i];
    if (slot == kNoSlot) continue;  // Not admitted.
    float* row = RowAt(slot);
    RowMeta meta = Meta(slot);
    ++meta.updates;
    meta.clock = std::max(meta.clock, clock);
    optimizer_.Step(row, row + dim, grads.data() + i * dim, meta.updates,
                    lr_factor);
    SetMeta(slot, meta);
    if (tracked) Track(id, meta);
  }
  EvictIdle(clock);
  EvictOverCapacity();
  MaybeCompactOrders();
}

std::vector<uint64_t> SparseTable::LiveCandidates(const OrderKey& key,
                                                  std::vector<uint64_t>& group,
                                                  bool by_count) const {
  if (tier_ != nullptr) return LiveCandidatesTiered(key, group, by_count);
  std::vector<uint64_t> live;
  live.reserve(group.size());
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < group.size(); ++i) {
    if (i + kAhead < group.size()) slots_.prefetch(group[i + kAhead]);
    const uint64_t id = group[i];
    auto it = slots_.find(id);
    if (it == slots_.end()) continue;
    const RowMeta meta = Meta(it->slot);
    if (meta.clock != key.second) continue;
    if (by_count && meta.updates != key.first) continue;
    live.push_back(id);
  }
  std::sort(live.begin(), live.end());
  live.erase(std::unique(live.begin(), live.end()), live.end());
  return live;
}

void SparseTable::EvictIdle(int64_t clock) {
  if (max_idle_clocks_ <= 0) return;
  const int64_t threshold = clock - max_idle_clocks_;
  while (!by_clock_.empty() && by_clock_.begin()->first.second < threshold) {
    auto group = by_clock_.begin();
    order_entries_ -= group->second.size();
    const std::vector<uint64_t> live =
        LiveCandidates(group->first, group->second, false);
    for (size_t i = 0; i < live.size(); ++i) {
      if (i + 8 < live.size()) slots_.prefetch(live[i + 8]);
      Evict(live[i]);
    }
    by_clock_.erase(group);
  }
  if (tier_ != nullptr) CommitTier();
}

void SparseTable::EvictOverCapacity() {
  if (max_rows_ <= 0) return;
  EvictionOrder& order = lfu_ ? by_count_ : by_clock_;
  while (num_rows() > max_rows_ && !order.empty()) {
    auto group = order.begin();
    order_entries_ -= group->second.size();
    std::vector<uint64_t> live =
        LiveCandidates(group->first, group->second, lfu_);
    size_t evicted = 0;
    while (evicted < live.size() && num_rows() > max_rows_) {
      if (evicted + 8 < live.size()) slots_.prefetch(live[evicted + 8]);
      Evict(live[evicted++]);
    }
    if (evicted == live.size()) {
      order.erase(group);
    } else {
      live.erase(live.begin(), live.begin() + static_cast<ptrdiff_t>(evicted));
      order_entries_ += live.size();
      group->second = std::move(live);
    }
  }
  if (tier_ != nullptr) CommitTier();
}

void SparseTable::MaybeCompactOrders() {
  if (order_entries_ <= 2 * static_cast<size_t>(num_rows()) + 4096) return;
  by_clock_.clear();
  by_count_.clear();
  order_entries_ = 0;
  for (const SparseSlotEntry& e : slots_) Track(e.id(), Meta(e.slot));
  if (tier_ == nullptr || cold_rows_ == 0) return;
  // Cold rows' clocks and counts, one pass over the tier (no values kept).
  absl::Status s =
      tier_->ForEach(table_index_, [this](uint64_t id, std::string_view value) {
        RowMeta meta;
        if (SparseTier::Decode(value, stride(), &meta.clock, &meta.updates,
                               nullptr)) {
          Track(id, meta);
        }
      });
  if (!s.ok()) TierFailed(s);
}

}  // namespace ps

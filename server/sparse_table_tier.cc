// SparseTable's memory tier (docs/sparse.md, "Memory: the budget and the
// estimate"): under a budget, at most max_hot_ rows stay in memory and the
// others live in the job's SparseTier. The rule that keeps values exact: a
// row is in exactly one place (memory or the tier), and every change goes
// through the same optimizer step on the same floats wherever they are.
//
// - A pull (ReadTiered) reads memory, then the missing rows from the tier in
//   one MultiGet, and promotes those it found (demoting as a push does): it
//   changes no row's values, only where rows live. An id the cold-id filter
//   has never seen (a new id) is not looked up. A job's pulls read their
//   cold rows before, without the job's lock, and ReadTiered takes those
//   that did not change since (server/sparse_cold_read.cc).
// - A push (ApplyTiered) pins the rows it finds in memory, reads the others
//   in one MultiGet and promotes them into memory, demoting unpinned rows
//   (the table's policy among 8 sampled slots: for LFU the least often
//   updated; for LRU the least recently updated, a row updated only once
//   going first, segmented LRU); a row that finds no room (every hot row
//   pinned by this push) is stepped in a scratch buffer and written back to
//   the tier. The tier's writes of a call go in one batch.
// - The table's own eviction (idle time, max_rows_per_server) deletes rows
//   wherever they live; a cold candidate's clock and count come from the
//   tier.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/sparse_memory.h"
#include "server/sparse_table.h"

namespace ps {
namespace {

// Slots sampled for a victim (Redis-style approximate LRU/LFU).
constexpr int kVictimSamples = 8;
// LRU: how many of the table's updates a row updated more than once
// outlives a row updated once that was last used at the same time.
constexpr int64_t kProtectedTicks = 64;
// Bits the cold-id filter sets per id.
constexpr int kFilterProbes = 3;

// The filter's two hashes of `id` (splitmix64's finalizer).
std::pair<uint64_t, uint64_t> FilterHashes(uint64_t id) {
  uint64_t h = id + 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return {h, (h >> 32) | 1};
}

// The estimate's formula (common/sparse_memory.h) is the index's layout.
static_assert(SparseSlotIndex::kBytesPerCapacity ==
              kSparseIndexBytesPerCapacity);

}  // namespace

bool SparseTable::Contains(uint64_t id) const {
  if (slots_.contains(id)) return true;
  if (tier_ == nullptr || !MaybeCold(id)) return false;
  std::vector<std::string> values;
  if (absl::Status s = tier_->MultiGet(table_index_, {&id, 1}, &values);
      !s.ok()) {
    TierFailed(s);
    return false;
  }
  return !values[0].empty();
}

int64_t SparseTable::memory_bytes() const {
  const auto chunk_rows = static_cast<int64_t>(chunk_mask_) + 1;
  const int64_t per_slot = static_cast<int64_t>(slot_floats() * sizeof(float)) +
                           (tier_ != nullptr ? 16 : 0);
  return static_cast<int64_t>(chunks_.size()) * chunk_rows * per_slot +
         SparseIndexBytes(static_cast<int64_t>(slots_.capacity())) +
         static_cast<int64_t>(free_slots_.capacity() * sizeof(uint32_t)) +
         static_cast<int64_t>(cold_filter_.capacity() * sizeof(uint64_t));
}

void SparseTable::FilterAdd(uint64_t id) {
  if (max_hot_ <= 0) return;  // No filter: MaybeCold is always true.
  if (cold_filter_.empty()) {
    const int64_t bytes = max_hot_ * kSparseColdFilterBytesPerHotRow;
    cold_filter_.assign(static_cast<size_t>((bytes + 7) / 8), 0);
  }
  const uint64_t bits = cold_filter_.size() * 64;
  auto [h, step] = FilterHashes(id);
  for (int i = 0; i < kFilterProbes; ++i, h += step) {
    const uint64_t bit = h % bits;
    cold_filter_[bit >> 6] |= uint64_t{1} << (bit & 63);
  }
}

bool SparseTable::MaybeCold(uint64_t id) const {
  if (max_hot_ <= 0) return true;
  if (cold_filter_.empty()) return false;  // Nothing written yet.
  const uint64_t bits = cold_filter_.size() * 64;
  auto [h, step] = FilterHashes(id);
  for (int i = 0; i < kFilterProbes; ++i, h += step) {
    const uint64_t bit = h % bits;
    if ((cold_filter_[bit >> 6] & (uint64_t{1} << (bit & 63))) == 0) {
      return false;
    }
  }
  return true;
}

SparseTierCounts SparseTable::tier_counts() const {
  return {.memory_bytes = memory_bytes(),
          .hot_rows = static_cast<int64_t>(slots_.size()),
          .cold_rows = cold_rows_,
          .hits = hits_,
          .misses = misses_,
          .disk_reads = disk_reads_,
          .demotions = demotions_,
          .clean_demotions = clean_demotions_};
}

void SparseTable::TierFailed(const absl::Status& status) const {
  if (!tier_status_.ok()) return;
  tier_status_ = absl::Status(
      status.code(),
      absl::StrCat("sparse table ", table_index_, ": ", status.message()));
  PS_LOG_ERROR(tier_status_.message());
}

void SparseTable::CommitTier() {
  if (absl::Status s = tier_->Write(batch_); !s.ok()) TierFailed(s);
}

void SparseTable::Demote(uint32_t slot) {
  const uint64_t id = SlotId(slot);
  if ((SlotTick(slot) & kCleanTick) == 0) {
    // Changed since it was read from the tier (or never there): written.
    // A clean row's copy in the tier is still its value.
    const RowMeta meta = Meta(slot);
    FilterAdd(id);
    TierPut(id, meta, RowAt(slot));
  } else {
    ++clean_demotions_;
  }
  slots_.erase(id);
  SlotTick(slot) = kFreeTick;
  CountCold(id, 1);
  ++demotions_;
}

SparseTable::OrderKey SparseTable::VictimKey(uint64_t word) const {
  const auto tick = static_cast<int64_t>(word & kTickMask);
  const auto updates =
      static_cast<int64_t>((word & kTickUpdatesMask) >> kTickUpdatesShift);
  if (lfu_) return {updates, tick};
  // LRU, segmented: a row updated once (most new ids of a long tail are
  // seen once) goes before a row updated again, unless that one has been
  // idle kProtectedTicks more updates of the table.
  return {0, tick + (updates > 1 ? kProtectedTicks : 0)};
}

uint32_t SparseTable::TakeSlot() {
  const uint32_t fresh = AllocateSlot();
  if (fresh != kNoSlot || next_slot_ == 0) return fresh;
  uint32_t victim = kNoSlot;
  OrderKey best{};
  int seen = 0;
  uint32_t drawn = 0;
  uint32_t candidates[kVictimSamples];
  while (seen < kVictimSamples && drawn < next_slot_) {
    // Slots drawn at random (a 32-bit LCG: deterministic), so that rows
    // placed side by side are not sampled together; all of a round's slots
    // fetched before any is compared (their misses overlap).
    const uint32_t want = std::min<uint32_t>(
        static_cast<uint32_t>(kVictimSamples - seen), next_slot_ - drawn);
    for (uint32_t k = 0; k < want; ++k) {
      hand_ = hand_ * 1664525u + 1013904223u;
      const auto slot =
          static_cast<uint32_t>((uint64_t{hand_} * next_slot_) >> 32);
      candidates[k] = slot;
      __builtin_prefetch(&SlotTick(slot));
    }
    drawn += want;
    for (uint32_t k = 0; k < want; ++k) {
      const uint32_t slot = candidates[k];
      const uint64_t word = SlotTick(slot);
      if (word == kFreeTick) continue;                          // Free.
      if ((word & kTickMask) == (tick_ & kTickMask)) continue;  // Pinned.
      ++seen;
      const OrderKey key = VictimKey(word);
      if (victim == kNoSlot || key < best) {
        victim = slot;
        best = key;
        // Demote reads its id and row: fetched while the others compare.
        __builtin_prefetch(&SlotId(slot));
        const float* row = RowAt(slot) - kMetaFloats;
        __builtin_prefetch(row);
        __builtin_prefetch(row + 16);
      }
    }
  }
  if (victim == kNoSlot) return kNoSlot;
  Demote(victim);
  return victim;
}

void SparseTable::ReadTiered(std::span<const uint64_t> keys, float* out,
                             ColdRead* cold) const {
  const size_t dim = static_cast<size_t>(dim_);
  // A planned read's rows that did not change since (their values read).
  const std::vector<char> usable =
      cold != nullptr ? FinishColdRead(cold) : std::vector<char>();
  std::vector<uint64_t> miss_ids;
  std::vector<size_t> miss_at;
  std::vector<size_t> ready_at;  // Keys whose row `cold` holds.
  constexpr size_t kAhead = 8;   // Index entries fetched ahead.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size()) slots_.prefetch(keys[i + kAhead]);
    auto it = slots_.find(keys[i]);
    if (it != slots_.end()) {
      std::memcpy(out + i * dim, RowAt(it->slot), dim * sizeof(float));
      ++hits_;
      continue;
    }
    ++misses_;
    if (cold != nullptr && cold->at[i] >= 0 && usable[cold->at[i]]) {
      ready_at.push_back(i);
      continue;
    }
    if (absent_.contains(keys[i])) {  // Found nowhere since the last Apply.
      FillMissing(keys[i], out + i * dim);
      continue;
    }
    if (!MaybeCold(keys[i])) {  // Never written to the tier: no row.
      absent_.insert(keys[i]);
      FillMissing(keys[i], out + i * dim);
      continue;
    }
    miss_ids.push_back(keys[i]);
    miss_at.push_back(i);
  }
  if (miss_ids.empty() && ready_at.empty()) return;
  std::vector<std::string> values;
  absl::Status read = tier_->MultiGet(table_index_, miss_ids, &values);
  if (!read.ok()) {
    TierFailed(read);
    values.assign(miss_ids.size(), std::string());
  }
  // Read is logically const: it changes no row, only where rows live. The
  // rows it read from the tier are promoted (a worker pushes the rows it
  // pulled, so the push then finds them in memory). A planned row found
  // nowhere is absent if no update came since the plan.
  SparseTable* const self = const_cast<SparseTable*>(this);
  const auto place = [&](uint64_t id, const std::string& value, bool absent,
                         float* row) {
    if (value.size() ==
        SparseTier::kRowHeaderBytes + stride() * sizeof(float)) {
      std::memcpy(row, value.data() + SparseTier::kRowHeaderBytes,
                  dim * sizeof(float));
      ++disk_reads_;
      self->Promote(id, value);
      return;
    }
    if (absent) absent_.insert(id);
    FillMissing(id, row);
  };
  for (size_t i : ready_at) {
    const auto j = static_cast<size_t>(cold->at[i]);
    place(keys[i], cold->values[j], cold->tick == tick_, out + i * dim);
  }
  for (size_t j = 0; j < miss_ids.size(); ++j) {
    place(miss_ids[j], values[j], read.ok(), out + miss_at[j] * dim);
  }
  self->CommitTier();
}

void SparseTable::FillMissing(uint64_t id, float* row) const {
  const size_t dim = static_cast<size_t>(dim_);
  if (unconditional_admission()) {
    init_.Fill(id, std::span<float>(row, dim));
  } else {
    std::fill(row, row + dim, 0.0f);
  }
}

void SparseTable::Promote(uint64_t id, std::string_view value) {
  if (slots_.contains(id)) return;  // A repeated id of the same read.
  const uint32_t slot = TakeSlot();
  if (slot == kNoSlot) return;
  RowMeta meta;
  SparseTier::Decode(value, stride(), &meta.clock, &meta.updates, RowAt(slot));
  SetMeta(slot, meta);
  slots_.emplace(id, slot);
  SlotId(slot) = id;
  // Clean: the tier keeps its copy (no deletion), the same bytes.
  SlotTick(slot) = kFreeTick;
  Touch(slot, /*clean=*/true);
  TickUpdates(slot, meta.updates);
  CountCold(id, -1);
}

void SparseTable::PinHot(std::span<const uint64_t> keys,
                         std::vector<uint64_t>* miss_ids,
                         std::vector<size_t>* miss_at) {
  found_.resize(keys.size());
  scratch_index_.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = slots_.find(keys[i]);
    if (it != slots_.end()) {
      found_[i] = it->slot;
      Touch(it->slot, /*clean=*/false);  // Stepped below.
      ++hits_;
      continue;
    }
    found_[i] = kNoSlot;
    // Each id once (an update may repeat one): a repeat finds the row where
    // the first put it. An id a Read found nowhere is not read.
    if (scratch_index_.try_emplace(keys[i], 0).second &&
        !absent_.contains(keys[i]) && MaybeCold(keys[i])) {
      miss_ids->push_back(keys[i]);
      miss_at->push_back(i);
    }
  }
  misses_ += static_cast<int64_t>(scratch_index_.size());
  scratch_index_.clear();
  absent_.clear();  // Rows are created from here on.
}

float* SparseTable::AddScratch(uint64_t id, const RowMeta& meta, bool created) {
  scratch_index_[id] = static_cast<uint32_t>(scratch_rows_.size());
  scratch_rows_.push_back({.id = id, .meta = meta, .created = created});
  scratch_floats_.resize(scratch_floats_.size() + stride(), 0.0f);
  return scratch_floats_.data() + scratch_floats_.size() - stride();
}

bool SparseTable::PromoteMisses(std::span<const uint64_t> miss_ids,
                                std::span<const size_t> miss_at) {
  scratch_rows_.clear();
  scratch_floats_.clear();
  std::vector<std::string> values;
  if (absl::Status s = tier_->MultiGet(table_index_, miss_ids, &values);
      !s.ok()) {
    TierFailed(s);
    return false;
  }
  for (size_t j = 0; j < miss_ids.size(); ++j) {
    if (values[j].empty()) continue;
    ++disk_reads_;
    const uint64_t id = miss_ids[j];
    const uint32_t slot = TakeSlot();
    float* floats;
    if (slot != kNoSlot) {
      floats = RowAt(slot);
      slots_.emplace(id, slot);
      SlotId(slot) = id;
      SlotTick(slot) = kFreeTick;
      Touch(slot, /*clean=*/false);  // Stepped below.
      CountCold(id, -1);
      found_[miss_at[j]] = slot;
    } else {
      floats = AddScratch(id, {}, /*created=*/false);
    }
    RowMeta meta;
    if (!SparseTier::Decode(values[j], stride(), &meta.clock, &meta.updates,
                            floats)) {
      TierFailed(absl::DataLossError(
          absl::StrCat("tier row ", id, " has ", values[j].size(), " bytes")));
      return false;
    }
    if (slot != kNoSlot) {
      SetMeta(slot, meta);
      TickUpdates(slot, meta.updates);
    } else {
      scratch_rows_.back().meta = meta;
    }
  }
  return true;
}

void SparseTable::ApplyTiered(std::span<const uint64_t> keys,
                              std::span<const float> grads, int64_t clock,
                              float lr_factor) {
  const size_t dim = static_cast<size_t>(dim_);
  ++tick_;
  // Pass 1: the rows in memory, pinned for this call; pass 2: the others
  // from the tier, promoted where there is room.
  std::vector<uint64_t> miss_ids;
  std::vector<size_t> miss_at;
  PinHot(keys, &miss_ids, &miss_at);
  if (!PromoteMisses(miss_ids, miss_at)) return;  // The job stops serving.
  // Pass 3: the steps, in key order, wherever each row is.
  const bool tracked = max_idle_clocks_ > 0 || max_rows_ > 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t id = keys[i];
    uint32_t slot = found_[i];
    int64_t scratch = -1;
    if (slot == kNoSlot) {
      if (auto it = slots_.find(id); it != slots_.end()) {
        slot = it->slot;  // Created earlier in this call (a repeated id).
      } else if (auto st = scratch_index_.find(id);
                 st != scratch_index_.end()) {
        scratch = st->second;
      } else if (Admit(id, clock)) {
        ++admissions_;
        slot = NewRow(id, clock);
        if (slot == kNoSlot) {  // No room: a new cold row.
          scratch = static_cast<int64_t>(scratch_rows_.size());
          float* row =
              AddScratch(id, {.clock = clock, .updates = 0}, /*created=*/true);
          init_.Fill(id, std::span<float>(row, dim));
        }
      } else {
        ++rejections_;
        continue;
      }
    }
    float* row = scratch >= 0 ? scratch_floats_.data() +
                                    static_cast<size_t>(scratch) * stride()
                              : RowAt(slot);
    RowMeta meta = scratch >= 0 ? scratch_rows_[scratch].meta : Meta(slot);
    ++meta.updates;
    meta.clock = std::max(meta.clock, clock);
    optimizer_.Step(row, row + dim, grads.data() + i * dim, meta.updates,
                    lr_factor);
    if (scratch >= 0) {
      scratch_rows_[scratch].meta = meta;
    } else {
      SetMeta(slot, meta);
      TickUpdates(slot, meta.updates);
    }
    if (tracked) Track(id, meta);
  }
  for (size_t k = 0; k < scratch_rows_.size(); ++k) {
    const ScratchRow& r = scratch_rows_[k];
    FilterAdd(r.id);
    TierPut(r.id, r.meta, scratch_floats_.data() + k * stride());
    if (r.created) CountCold(r.id, 1);
  }
  CommitTier();
  EvictIdle(clock);
  EvictOverCapacity();
  MaybeCompactOrders();
}

std::vector<uint64_t> SparseTable::LiveCandidatesTiered(
    const OrderKey& key, std::vector<uint64_t>& group, bool by_count) const {
  std::vector<uint64_t> live;
  std::vector<uint64_t> cold;
  const auto matches = [&](const RowMeta& meta) {
    return meta.clock == key.second && (!by_count || meta.updates == key.first);
  };
  for (uint64_t id : group) {
    auto it = slots_.find(id);
    if (it == slots_.end()) {
      cold.push_back(id);
    } else if (matches(Meta(it->slot))) {
      live.push_back(id);
    }
  }
  std::sort(cold.begin(), cold.end());
  cold.erase(std::unique(cold.begin(), cold.end()), cold.end());
  std::vector<std::string> values;
  if (absl::Status s = tier_->MultiGet(table_index_, cold, &values); !s.ok()) {
    TierFailed(s);
    values.assign(cold.size(), std::string());
  }
  for (size_t j = 0; j < cold.size(); ++j) {
    RowMeta meta;
    if (SparseTier::Decode(values[j], stride(), &meta.clock, &meta.updates,
                           nullptr) &&
        matches(meta)) {
      live.push_back(cold[j]);
    }
  }
  std::sort(live.begin(), live.end());
  live.erase(std::unique(live.begin(), live.end()), live.end());
  return live;
}

void SparseTable::CountCold(uint64_t id, int delta) {
  cold_rows_ += delta;
  uint32_t& bucket =
      cold_in_bucket_[BucketOfId(id, table_index_, num_buckets_)];
  bucket = delta > 0 ? bucket + 1 : bucket - 1;
}

void SparseTable::RestoreTiered(const SparseBucket& contents) {
  ++tick_;
  absent_.clear();
  // Which of the bucket's ids (rows and pending) are in the tier now; those
  // in memory are pinned (no placement below demotes them).
  std::vector<uint64_t> ids;
  for (uint64_t id : contents.ids) {
    if (auto it = slots_.find(id); it != slots_.end()) {
      Touch(it->slot, /*clean=*/false);
    } else {
      ids.push_back(id);
    }
  }
  for (uint64_t id : contents.pending_ids) {
    if (auto it = slots_.find(id); it != slots_.end()) {
      Touch(it->slot, /*clean=*/false);
    } else {
      ids.push_back(id);
    }
  }
  std::vector<std::string> values;
  if (absl::Status s = tier_->MultiGet(table_index_, ids, &values); !s.ok()) {
    TierFailed(s);
    return;
  }
  absl::flat_hash_map<uint64_t, bool> was_cold;
  for (size_t j = 0; j < ids.size(); ++j) was_cold[ids[j]] = !values[j].empty();
  for (size_t i = 0; i < contents.ids.size(); ++i) {
    const uint64_t id = contents.ids[i];
    const float* floats = contents.floats.data() + i * stride();
    const RowMeta meta{.clock = contents.last_clocks[i],
                       .updates = contents.update_counts[i]};
    pending_.erase(id);
    auto it = slots_.find(id);
    uint32_t slot = it != slots_.end() ? it->slot : TakeSlot();
    const bool cold = was_cold[id];
    if (slot != kNoSlot) {
      if (it == slots_.end()) {
        slots_.emplace(id, slot);
        SlotId(slot) = id;
        SlotTick(slot) = kFreeTick;
        // A copy left in the tier is stale; the row is not clean.
        if (cold) CountCold(id, -1);
      }
      Touch(slot, /*clean=*/false);
      std::memcpy(RowAt(slot), floats, stride() * sizeof(float));
      SetMeta(slot, meta);
      TickUpdates(slot, meta.updates);
    } else {
      FilterAdd(id);
      TierPut(id, meta, floats);
      if (!cold) CountCold(id, 1);
    }
    Track(id, meta);
  }
  for (size_t i = 0; i < contents.pending_ids.size(); ++i) {
    const uint64_t id = contents.pending_ids[i];
    if (auto it = slots_.find(id); it != slots_.end()) {
      SlotTick(it->slot) = kFreeTick;  // Replaced: not an eviction.
      free_slots_.push_back(it->slot);
      slots_.erase(it);
      // Its stale copy in the tier, if any, goes too.
      if (MaybeCold(id)) TierDelete(id);
    } else if (was_cold[id]) {
      TierDelete(id);
      CountCold(id, -1);
    }
    pending_[id] = contents.pending_counts[i];
  }
  CommitTier();
}

}  // namespace ps

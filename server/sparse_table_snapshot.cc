// SparseTable's snapshot and restore (docs/sparse.md, "The bucket snapshot
// format"): every bucket's rows encoded in id order into a string of its
// exact size, and a stored bucket checked and taken back.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/sparse_keys.h"
#include "common/status_macros.h"
#include "server/sort_by_key.h"
#include "server/sparse_bucket_codec.h"
#include "server/sparse_table.h"

namespace ps {

std::vector<SparseTable::SnapshotEntry> SparseTable::EntriesByBucket(
    const std::vector<std::pair<uint64_t, std::string>>& cold,
    std::vector<uint32_t>* start) const {
  // Every row (hot, and cold from the tier) once, grouped by bucket with a
  // counting sort, then ids ascending within each. Each row's bucket is
  // hashed once (the first pass keeps it, in the order the second visits
  // the rows), and the rows go straight to their place: no copy of them
  // in table order first.
  const size_t n = slots_.size() + cold.size();
  const std::unique_ptr<uint32_t[]> bucket_of(new uint32_t[n]);
  start->assign(size_t{num_buckets_} + 1, 0);
  size_t i = 0;
  for (const SparseSlotEntry& e : slots_) {
    bucket_of[i] = BucketOfId(e.id(), table_index_, num_buckets_);
    ++(*start)[bucket_of[i++] + 1];
  }
  for (const auto& [id, bytes] : cold) {
    bucket_of[i] = BucketOfId(id, table_index_, num_buckets_);
    ++(*start)[bucket_of[i++] + 1];
  }
  for (uint32_t b = 0; b < num_buckets_; ++b) (*start)[b + 1] += (*start)[b];
  std::vector<SnapshotEntry> entries(n);
  std::vector<uint32_t> next(start->begin(), start->end() - 1);
  i = 0;
  for (const SparseSlotEntry& e : slots_) {
    entries[next[bucket_of[i++]]++] = {e.id(), e.slot, 0};
  }
  for (size_t c = 0; c < cold.size(); ++c) {
    entries[next[bucket_of[i++]]++] = {cold[c].first, static_cast<uint32_t>(c),
                                       1};
  }
  std::vector<SnapshotEntry> scratch;
  std::vector<uint32_t> count;
  for (uint32_t b = 0; b < num_buckets_; ++b) {
    SortByKey(
        entries.data() + (*start)[b], entries.data() + (*start)[b + 1],
        [](const SnapshotEntry& e) { return e.id; }, &scratch, &count);
  }
  return entries;
}

std::vector<std::pair<uint32_t, uint64_t>> SparseTable::PendingByBucket()
    const {
  std::vector<std::pair<uint32_t, uint64_t>> pending;
  pending.reserve(pending_.size());
  for (const auto& [id, count] : pending_) {
    pending.emplace_back(BucketOfId(id, table_index_, num_buckets_), id);
  }
  std::sort(pending.begin(), pending.end());
  return pending;
}

std::vector<StoredBlock> SparseTable::Snapshot() const {
  std::vector<StoredBlock> blocks;
  size_t next = 0;
  SnapshotInto(&blocks, &next);
  return blocks;
}

void SparseTable::SnapshotInto(std::vector<StoredBlock>* blocks,
                               size_t* next) const {
  if (tier_ != nullptr) {
    SnapshotTieredInto(blocks, next);
    return;
  }
  const std::vector<std::pair<uint64_t, std::string>> cold;  // No tier: none.
  std::vector<uint32_t> start;
  const std::vector<SnapshotEntry> entries = EntriesByBucket(cold, &start);
  // Pending ids (admission counts), by bucket then id.
  std::vector<std::pair<uint32_t, uint64_t>> pending;
  pending.reserve(pending_.size());
  for (const auto& [id, count] : pending_) {
    pending.emplace_back(BucketOfId(id, table_index_, num_buckets_), id);
  }
  std::sort(pending.begin(), pending.end());

  std::vector<float> floats(stride());
  std::string header;
  size_t p = 0;
  for (uint32_t b = 0; b < num_buckets_; ++b) {
    const size_t rows = start[b + 1] - start[b];
    size_t pending_end = p;
    while (pending_end < pending.size() && pending[pending_end].first == b) {
      ++pending_end;
    }
    if (!held_[b] && rows == 0 && pending_end == p) continue;
    // A block of the last snapshot taken over: every field set again, the
    // rows resized (which fills only bytes past the old size) and then
    // written whole.
    StoredBlock& block =
        *next < blocks->size() ? (*blocks)[*next] : blocks->emplace_back();
    ++*next;
    block.key = BucketKey(table_index_, b);
    block.values.clear();
    block.optimizer_state.clear();
    block.optimizer_step = 0;
    if (rows == 0 && pending_end == p) {
      block.rows.clear();
      continue;
    }
    const SnapshotEntry* first = entries.data() + start[b];
    header.clear();
    AppendSparseBucketHeader(
        static_cast<uint8_t>(optimizer_.kind()), static_cast<uint32_t>(dim_),
        static_cast<uint32_t>(state_floats_), static_cast<uint32_t>(rows),
        static_cast<uint32_t>(pending_end - p), &header);
    block.rows.resize(SparseBucketBytes(stride(), rows, pending_end - p));
    std::memcpy(block.rows.data(), header.data(), header.size());
    char* at = block.rows.data() + header.size();
    // Rows in id order are at random slots: each one's cache lines (a
    // slot spans two or three) fetched kAhead rows before it is copied.
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < rows; ++i) {
      if (i + kAhead < rows && first[i + kAhead].cold == 0) {
        const float* slot = RowAt(first[i + kAhead].ref) - kMetaFloats;
        for (size_t f = 0; f < slot_floats(); f += 16) {
          __builtin_prefetch(slot + f);
        }
        __builtin_prefetch(slot + slot_floats() - 1);
      }
      const SnapshotEntry& e = first[i];
      RowMeta meta;
      const float* row = floats.data();
      if (e.cold == 0) {
        meta = Meta(e.ref);
        row = RowAt(e.ref);
      } else {
        SparseTier::Decode(cold[e.ref].second, stride(), &meta.clock,
                           &meta.updates, floats.data());
      }
      at =
          PutSparseBucketRow(at, e.id, meta.clock, meta.updates, row, stride());
    }
    for (; p < pending_end; ++p) {
      at = PutSparseBucketPending(at, pending[p].second,
                                  pending_.at(pending[p].second));
    }
  }
}

void SparseTable::SnapshotTieredInto(std::vector<StoredBlock>* blocks,
                                     size_t* next) const {
  // The one encoding of a tiered table's snapshot, here waiting for the
  // tier's view (a durable snapshot waits off the job's lock instead:
  // SparseTableSet::CutTiered).
  const SparseTableCut cut = Cut();
  const std::unique_ptr<SparseTier::View> view = tier_->ViewNow();
  if (absl::Status s = cut.EncodeInto(*view, blocks, next); !s.ok()) {
    TierFailed(s);
  }
}

SparseTableCut SparseTable::Cut() const {
  PS_CHECK(tier_ != nullptr);
  SparseTableCut cut;
  cut.table_index_ = table_index_;
  cut.num_buckets_ = num_buckets_;
  cut.optimizer_kind_ = static_cast<uint8_t>(optimizer_.kind());
  cut.dim_ = static_cast<uint32_t>(dim_);
  cut.state_floats_ = static_cast<uint32_t>(state_floats_);
  cut.held_ = held_;
  cut.cold_ = cold_in_bucket_;
  const std::vector<SnapshotEntry> entries =
      EntriesByBucket({}, &cut.hot_start_);
  // The hot rows as a bucket holds them, in the snapshot's order.
  const size_t row_bytes =
      SparseBucketBytes(stride(), 1, 0) - SparseBucketBytes(stride(), 0, 0);
  cut.hot_.resize(entries.size() * row_bytes);
  char* at = cut.hot_.data();
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i + kAhead < entries.size()) {
      const float* slot = RowAt(entries[i + kAhead].ref) - kMetaFloats;
      for (size_t f = 0; f < slot_floats(); f += 16)
        __builtin_prefetch(slot + f);
      __builtin_prefetch(slot + slot_floats() - 1);
    }
    const RowMeta meta = Meta(entries[i].ref);
    at = PutSparseBucketRow(at, entries[i].id, meta.clock, meta.updates,
                            RowAt(entries[i].ref), stride());
  }
  const std::vector<std::pair<uint32_t, uint64_t>> pending = PendingByBucket();
  cut.pending_start_.assign(size_t{num_buckets_} + 1, 0);
  cut.pending_.reserve(pending.size());
  for (const auto& [bucket, id] : pending) {
    ++cut.pending_start_[bucket + 1];
    cut.pending_.emplace_back(id, pending_.at(id));
  }
  for (uint32_t b = 0; b < num_buckets_; ++b) {
    cut.pending_start_[b + 1] += cut.pending_start_[b];
  }
  for (uint32_t b = 0; b < num_buckets_; ++b) {
    const size_t rows =
        cut.hot_start_[b + 1] - cut.hot_start_[b] + size_t{cut.cold_[b]};
    const size_t pend = cut.pending_start_[b + 1] - cut.pending_start_[b];
    if (rows > 0 || pend > 0) {
      cut.rows_bytes_ +=
          static_cast<int64_t>(SparseBucketBytes(stride(), rows, pend));
    }
  }
  return cut;
}

std::vector<BucketRowsSize> SparseTableCut::Buckets() const {
  const size_t stride = size_t{dim_} + state_floats_;
  std::vector<BucketRowsSize> buckets;
  for (uint32_t b = 0; b < num_buckets_; ++b) {
    const size_t rows = hot_start_[b + 1] - hot_start_[b] + size_t{cold_[b]};
    const size_t pend = pending_start_[b + 1] - pending_start_[b];
    if (!held_[b] && rows == 0 && pend == 0) continue;
    buckets.push_back({.key = BucketKey(table_index_, b),
                       .rows = rows == 0 && pend == 0
                                   ? 0
                                   : SparseBucketBytes(stride, rows, pend)});
  }
  return buckets;
}

absl::Status SparseTableCut::EncodeBucket(uint32_t bucket,
                                          SparseTier::View::Rows& rows,
                                          char* out) const {
  const uint32_t b = bucket;
  const size_t stride = size_t{dim_} + state_floats_;
  const size_t row_bytes =
      SparseBucketBytes(stride, 1, 0) - SparseBucketBytes(stride, 0, 0);
  const size_t value_bytes = SparseTier::kRowHeaderBytes + stride * 4;
  const uint32_t hot_end = hot_start_[b + 1];
  const uint32_t pend = pending_start_[b + 1] - pending_start_[b];
  std::string header;
  AppendSparseBucketHeader(
      optimizer_kind_, dim_, state_floats_,
      static_cast<uint32_t>(hot_end - hot_start_[b] + size_t{cold_[b]}), pend,
      &header);
  char* at = std::copy(header.begin(), header.end(), out);
  // The tier's rows of the bucket, ids ascending, each merged between the
  // hot rows around it: its next hot row, and the cold rows still to come.
  uint32_t hot_next = hot_start_[b];
  uint32_t cold_left = cold_[b];
  const auto hot_id = [&](uint32_t i) {
    uint64_t id;
    std::memcpy(&id, hot_.data() + size_t{i} * row_bytes, 8);
    return id;
  };
  // The bucket's hot rows with ids below `id` (all of them with `all`).
  const auto hot_until = [&](uint64_t id, bool all) {
    const uint32_t first = hot_next;
    uint32_t end = first;
    while (end < hot_end && (all || hot_id(end) < id)) ++end;
    const size_t bytes = size_t{end - first} * row_bytes;
    if (bytes > 0) {
      std::memcpy(at, hot_.data() + size_t{first} * row_bytes, bytes);
      at += bytes;
    }
    hot_next = end;
  };
  absl::Status bad;
  PS_RETURN_IF_ERROR(rows.Through(
      b, [&](uint32_t row_bucket, uint64_t id, std::string_view value) {
        if (!bad.ok()) return;
        if (row_bucket == b) {
          hot_until(id, false);
          // A promoted row's copy in the tier: the row in memory is its
          // value.
          if (hot_next < hot_end && hot_id(hot_next) == id) return;
        }
        if (row_bucket != b || cold_left == 0 || value.size() != value_bytes) {
          bad = absl::InternalError(absl::StrCat(
              "sparse table ", table_index_, ": the snapshot's tier row ", id,
              " (", value.size(), " bytes) of bucket ", row_bucket,
              " is not one the cut counted"));
          return;
        }
        --cold_left;
        std::memcpy(at, &id, 8);
        std::memcpy(at + 8, value.data(), value_bytes);
        at += row_bytes;
      }));
  PS_RETURN_IF_ERROR(bad);
  if (cold_left != 0) {
    return absl::InternalError(absl::StrCat(
        "sparse table ", table_index_, ": the snapshot's bucket ", b, " lacks ",
        cold_left, " of its ", cold_[b], " cold rows"));
  }
  hot_until(0, true);
  for (uint32_t p = pending_start_[b]; p < pending_start_[b + 1]; ++p) {
    at = PutSparseBucketPending(at, pending_[p].first, pending_[p].second);
  }
  return absl::OkStatus();
}

absl::Status SparseTableCut::Finish(SparseTier::View::Rows& rows) const {
  absl::Status bad;
  PS_RETURN_IF_ERROR(rows.Through(
      ~uint32_t{0}, [&](uint32_t bucket, uint64_t id, std::string_view value) {
        if (!bad.ok()) return;
        bad = absl::InternalError(absl::StrCat(
            "sparse table ", table_index_, ": the snapshot's tier row ", id,
            " (", value.size(), " bytes) of bucket ", bucket,
            " is not one the cut counted"));
      }));
  return bad;
}

absl::Status SparseTableCut::EncodeInto(const SparseTier::View& view,
                                        std::vector<StoredBlock>* blocks,
                                        size_t* next) const {
  // Bucket by bucket, each block of its exact size (the counts at the cut)
  // encoded in place: the tier's rows are read in the same order.
  PS_ASSIGN_OR_RETURN(const std::unique_ptr<SparseTier::View::Rows> rows,
                      view.RowsOf(table_index_));
  for (const BucketRowsSize& bucket : Buckets()) {
    StoredBlock& block =
        *next < blocks->size() ? (*blocks)[*next] : blocks->emplace_back();
    ++*next;
    block.key = bucket.key;
    block.values.clear();
    block.optimizer_state.clear();
    block.optimizer_step = 0;
    if (bucket.rows == 0) {
      block.rows.clear();
      continue;
    }
    // A block of the last snapshot taken over: resized (which fills only
    // bytes past the old size), then written whole.
    block.rows.resize(bucket.rows);
    PS_RETURN_IF_ERROR(
        EncodeBucket(BucketIndex(bucket.key), *rows, block.rows.data()));
  }
  return Finish(*rows);
}

absl::Status SparseTable::CheckBucket(uint32_t bucket,
                                      const SparseBucket& contents) const {
  if (contents.optimizer_kind != static_cast<uint8_t>(optimizer_.kind()) ||
      contents.dim != static_cast<uint32_t>(dim_) ||
      contents.state_floats != static_cast<uint32_t>(state_floats_)) {
    return absl::DataLossError(
        absl::StrCat("holds rows of optimizer kind ", contents.optimizer_kind,
                     ", dim ", contents.dim, " and ", contents.state_floats,
                     " state floats; the table has kind ",
                     static_cast<int>(optimizer_.kind()), ", dim ", dim_,
                     " and ", state_floats_));
  }
  const std::vector<uint64_t>& ids = contents.ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0 && ids[i] <= ids[i - 1]) {
      return absl::DataLossError(absl::StrCat("row ids not ascending at ", i));
    }
    if (BucketOfId(ids[i], table_index_, num_buckets_) != bucket) {
      return absl::DataLossError(
          absl::StrCat("row id ", ids[i], " belongs to another bucket"));
    }
    if (contents.update_counts[i] < 1) {
      return absl::DataLossError(absl::StrCat(
          "row id ", ids[i], " has update count ", contents.update_counts[i]));
    }
  }
  const std::vector<uint64_t>& pending = contents.pending_ids;
  for (size_t i = 0; i < pending.size(); ++i) {
    const int64_t count = contents.pending_counts[i];
    if ((i > 0 && pending[i] <= pending[i - 1]) ||
        BucketOfId(pending[i], table_index_, num_buckets_) != bucket ||
        count < 1 || count >= min_count_ ||
        std::binary_search(ids.begin(), ids.end(), pending[i])) {
      return absl::DataLossError(absl::StrCat(
          "pending id ", pending[i], " (count ", count,
          ") is out of order, of another bucket, also a row, or has a count "
          "outside 1 to min_count - 1 = ",
          min_count_ - 1));
    }
  }
  return absl::OkStatus();
}

absl::Status SparseTable::Restore(const StoredBlock& block) {
  if (!IsBucketKey(block.key) || BucketTable(block.key) != table_index_ ||
      BucketIndex(block.key) >= num_buckets_) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse table ", table_index_, ": key ", block.key,
                     " is not one of its ", num_buckets_, " buckets"));
  }
  const uint32_t bucket = BucketIndex(block.key);
  const std::string context =
      absl::StrCat("sparse table ", table_index_, ", bucket ", bucket, ": ");
  if (!block.values.empty() || !block.optimizer_state.empty()) {
    return absl::DataLossError(
        absl::StrCat(context, "a bucket holds no dense values or state"));
  }
  if (block.rows.empty()) return absl::OkStatus();
  absl::StatusOr<SparseBucket> contents = DecodeSparseBucket(block.rows);
  if (!contents.ok()) {
    return absl::DataLossError(
        absl::StrCat(context, contents.status().message()));
  }
  if (absl::Status status = CheckBucket(bucket, *contents); !status.ok()) {
    return absl::DataLossError(absl::StrCat(context, status.message()));
  }
  held_[bucket] = true;
  if (tier_ != nullptr) {
    RestoreTiered(*contents);
    return tier_status_;
  }
  for (size_t i = 0; i < contents->ids.size(); ++i) {
    const uint64_t id = contents->ids[i];
    pending_.erase(id);
    auto it = slots_.find(id);
    const uint32_t slot =
        it != slots_.end() ? it->slot : NewRow(id, contents->last_clocks[i]);
    std::memcpy(RowAt(slot), contents->floats.data() + i * stride(),
                stride() * sizeof(float));
    const RowMeta meta{.clock = contents->last_clocks[i],
                       .updates = contents->update_counts[i]};
    SetMeta(slot, meta);
    Track(id, meta);
  }
  for (size_t i = 0; i < contents->pending_ids.size(); ++i) {
    if (auto it = slots_.find(contents->pending_ids[i]); it != slots_.end()) {
      free_slots_.push_back(it->slot);  // Replaced: not an eviction.
      slots_.erase(it);
    }
    pending_[contents->pending_ids[i]] = contents->pending_counts[i];
  }
  return absl::OkStatus();
}

}  // namespace ps

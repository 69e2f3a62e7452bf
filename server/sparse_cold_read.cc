// A pull's cold reads without the job's lock (docs/sparse.md, "Threading"):
// under the lock the table plans which rows the pull reads from the tier
// and notes them as waited for; without it the tier reads them (RocksDB and
// the tier's queue are thread-safe); under the lock again the table takes
// the rows it read, except those whose tier copy was written in between
// (demoted again, stepped outside memory, evicted, restored), which it
// reads again there. A row hot by then is read from memory, whoever moved
// it, so the reply is the state at that moment, as if read under one lock.
//
// Why the checks are enough: a cold row's value is its tier copy, and every
// change of a tier copy goes through TierPut or TierDelete under the lock,
// which record the write for the ids a plan waits for. A row that moves
// into memory and back unchanged writes nothing, and its copy is still its
// value. A row created in between is in memory (read from there) or was
// written (read again). And "found nowhere" is remembered (absent_) only
// when no update came since the plan.
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "server/sparse_table.h"
#include "server/sparse_table_set.h"

namespace ps {

void SparseTable::PlanColdRead(std::span<const uint64_t> keys,
                               ColdRead* read) const {
  read->ids.clear();
  read->at.assign(keys.size(), -1);
  read->values.clear();
  read->status = absl::OkStatus();
  read->since = writes_;
  read->tick = tick_;
  if (tier_ == nullptr) return;
  absl::flat_hash_map<uint64_t, int32_t> index;
  constexpr size_t kAhead = 8;  // Index entries fetched ahead.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size()) slots_.prefetch(keys[i + kAhead]);
    const uint64_t id = keys[i];
    // As ReadTiered looks rows up: memory, rows known absent, the filter.
    if (slots_.contains(id) || absent_.contains(id) || !MaybeCold(id)) {
      continue;
    }
    auto [it, added] =
        index.try_emplace(id, static_cast<int32_t>(read->ids.size()));
    if (added) {
      read->ids.push_back(id);
      ++cold_waits_[id].reads;
    }
    read->at[i] = it->second;
  }
}

void SparseTable::ReadCold(ColdRead* read) const {
  if (read->ids.empty()) return;
  read->status = tier_->MultiGet(table_index_, read->ids, &read->values);
}

void SparseTable::Read(std::span<const uint64_t> keys, float* out,
                       ColdRead* cold) const {
  if (tier_ == nullptr || cold == nullptr) {
    if (cold != nullptr) DropColdRead(cold);
    Read(keys, out);
    return;
  }
  ReadTiered(keys, out, cold);
}

void SparseTable::DropColdRead(ColdRead* read) const { FinishColdRead(read); }

std::vector<char> SparseTable::FinishColdRead(ColdRead* cold) const {
  std::vector<char> usable(cold->ids.size(), 0);
  if (!cold->status.ok()) TierFailed(cold->status);
  const bool read =
      cold->status.ok() && cold->values.size() == cold->ids.size();
  for (size_t j = 0; j < cold->ids.size(); ++j) {
    auto it = cold_waits_.find(cold->ids[j]);
    if (it == cold_waits_.end()) continue;  // Not planned here (a bug).
    usable[j] = read && it->second.written <= cold->since;
    if (--it->second.reads == 0) cold_waits_.erase(it);
  }
  cold->ids.clear();
  return usable;
}

void SparseTable::TierPut(uint64_t id, const RowMeta& meta,
                          const float* floats) {
  if (!cold_waits_.empty()) {
    if (auto it = cold_waits_.find(id); it != cold_waits_.end()) {
      it->second.written = ++writes_;
    }
  }
  batch_.Put(table_index_, id, meta.clock, meta.updates, floats, stride());
}

void SparseTable::TierDelete(uint64_t id) {
  if (!cold_waits_.empty()) {
    if (auto it = cold_waits_.find(id); it != cold_waits_.end()) {
      it->second.written = ++writes_;
    }
  }
  batch_.Delete(table_index_, id);
}

SparseColdReads SparseTableSet::PlanColdReads(
    std::span<const SparseKeys> keys) const {
  SparseColdReads reads;
  if (tier_ == nullptr) return reads;
  reads.tables.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    tables_[keys[i].table].rows->PlanColdRead(keys[i].ids, &reads.tables[i]);
    reads.rows += reads.tables[i].ids.size();
  }
  return reads;
}

void SparseTableSet::ReadCold(std::span<const SparseKeys> keys,
                              SparseColdReads* reads) const {
  for (size_t i = 0; i < reads->tables.size(); ++i) {
    tables_[keys[i].table].rows->ReadCold(&reads->tables[i]);
  }
}

void SparseTableSet::DropColdReads(std::span<const SparseKeys> keys,
                                   SparseColdReads* reads) const {
  for (size_t i = 0; i < reads->tables.size(); ++i) {
    tables_[keys[i].table].rows->DropColdRead(&reads->tables[i]);
  }
  reads->tables.clear();
  reads->rows = 0;
}

}  // namespace ps

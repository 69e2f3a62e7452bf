// A sparse table's index of its rows in memory, id -> slot (docs/sparse.md,
// "Row layout and memory"): an absl::flat_hash_set of 12-byte entries (the
// id as two 4-byte halves, then the slot), 13 bytes a capacity unit with
// its control byte, where a flat_hash_map<uint64_t, uint32_t> stores a
// 16-byte pair (4 of them padding): a large table's index is about a
// quarter smaller, and so is the new memory it touches as it grows.
#ifndef PS_SERVER_SPARSE_SLOT_INDEX_H_
#define PS_SERVER_SPARSE_SLOT_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "server/huge_pages.h"

namespace ps {

// One row's entry: its id (as two halves, so that the entry is 4-byte
// aligned: 12 bytes) and its slot.
struct SparseSlotEntry {
  uint32_t id_lo = 0;
  uint32_t id_hi = 0;
  // The row's slot; mutable: a set's elements are const, and only the id
  // decides an entry's place.
  mutable uint32_t slot = 0;

  static SparseSlotEntry Of(uint64_t id, uint32_t slot) {
    return {.id_lo = static_cast<uint32_t>(id),
            .id_hi = static_cast<uint32_t>(id >> 32),
            .slot = slot};
  }
  uint64_t id() const { return uint64_t{id_hi} << 32 | id_lo; }
};
static_assert(sizeof(SparseSlotEntry) == 12 && alignof(SparseSlotEntry) == 4);

// id -> slot, with the calls of a map that SparseTable makes. The hash of
// an entry is absl::Hash<uint64_t> of its id; lookups take the uint64 id
// (no entry built). Iteration visits every entry once, in no particular
// order. Large arrays come from HugePageAllocator (the given pool, or
// MapHugePages). Thread-compatible.
class SparseSlotIndex {
 public:
  // Hash and equality of entries and ids alike (heterogeneous lookup).
  struct Hash {
    using is_transparent = void;
    size_t operator()(uint64_t id) const { return absl::Hash<uint64_t>()(id); }
    size_t operator()(const SparseSlotEntry& e) const {
      return (*this)(e.id());
    }
  };
  struct Eq {
    using is_transparent = void;
    bool operator()(uint64_t id, const SparseSlotEntry& e) const {
      return e.id() == id;
    }
    bool operator()(const SparseSlotEntry& e, uint64_t id) const {
      return e.id() == id;
    }
    bool operator()(const SparseSlotEntry& a, const SparseSlotEntry& b) const {
      return a.id_lo == b.id_lo && a.id_hi == b.id_hi;
    }
  };
  using Set = absl::flat_hash_set<SparseSlotEntry, Hash, Eq,
                                  HugePageAllocator<SparseSlotEntry>>;
  // An iterator's entry is const but for its slot (`it->slot = ...`).
  using iterator = Set::iterator;
  using const_iterator = Set::const_iterator;

  // Bytes per capacity unit: an entry and its control byte.
  static constexpr size_t kBytesPerCapacity = sizeof(SparseSlotEntry) + 1;

  // `pages`: where arrays of kHugePageBytes or more come from (null:
  // MapHugePages); it must outlive the index.
  explicit SparseSlotIndex(HugePagePool* pages = nullptr)
      : set_(0, Hash(), Eq(), HugePageAllocator<SparseSlotEntry>(pages)) {}

  iterator find(uint64_t id) { return set_.find(id); }
  const_iterator find(uint64_t id) const { return set_.find(id); }
  bool contains(uint64_t id) const { return set_.contains(id); }
  // Adds id -> slot unless `id` has an entry; the entry and whether it was
  // added (one probe either way).
  std::pair<iterator, bool> try_emplace(uint64_t id, uint32_t slot) {
    return set_.insert(SparseSlotEntry::Of(id, slot));
  }
  // Adds id -> slot; `id` must have no entry (else nothing changes).
  void emplace(uint64_t id, uint32_t slot) { try_emplace(id, slot); }
  void erase(const_iterator it) { set_.erase(it); }
  void erase(iterator it) { set_.erase(it); }
  // Removes `id`'s entry; 1 if it had one, else 0.
  size_t erase(uint64_t id) { return set_.erase(id); }
  // Fetches the cache lines a lookup of `id` starts with.
  void prefetch(uint64_t id) const { set_.prefetch(id); }
  // Room for `n` entries without growing.
  void reserve(size_t n) { set_.reserve(n); }

  size_t size() const { return set_.size(); }
  bool empty() const { return set_.empty(); }
  // Capacity units allocated (kBytesPerCapacity bytes each, plus 17).
  size_t capacity() const { return set_.capacity(); }

  iterator begin() { return set_.begin(); }
  iterator end() { return set_.end(); }
  const_iterator begin() const { return set_.begin(); }
  const_iterator end() const { return set_.end(); }

 private:
  Set set_;
};

}  // namespace ps

#endif  // PS_SERVER_SPARSE_SLOT_INDEX_H_

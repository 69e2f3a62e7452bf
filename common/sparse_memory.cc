#include "common/sparse_memory.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sparse_spec.h"

namespace ps {
namespace {

// Row bookkeeping before the floats: last-updated clock and update count.
constexpr int64_t kSlotMetaBytes = 16;
// Id and recency tick per slot, allocated with each chunk of slots.
constexpr int64_t kSlotInfoBytes = 16;
constexpr int32_t kMaxChunkLog2 = 12;
// Chunk size of a table without a budget.
constexpr int64_t kUnlimitedChunkRows = int64_t{1} << kMaxChunkLog2;

// RocksDB's bytes per entry beyond key and value (block-based table entry
// headers, index and Bloom filter share) and its space amplification
// (obsolete versions not yet compacted), measured with the tier's options:
// docs/sparse.md.
constexpr int64_t kTierEntryOverheadBytes = 8;
constexpr double kTierSpaceAmplification = 1.25;
constexpr int64_t kTierKeyBytes =
    16;  // Table, bucket, id (server/sparse_tier.h).

// absl::flat_hash_map's capacity for room of `growth` entries: the smallest
// 2^k - 1 whose 7/8 holds them (raw_hash_set's GrowthToLowerboundCapacity,
// then NormalizeCapacity).
int64_t HashCapacityFor(int64_t growth) {
  if (growth <= 0) return 0;
  const auto lower = static_cast<uint64_t>(growth + (growth - 1) / 7);
  return static_cast<int64_t>(~uint64_t{0} >> std::countl_zero(lower));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t PlanBytes(int64_t rows, int64_t chunk_rows, int64_t slot_bytes) {
  return CeilDiv(rows, chunk_rows) * chunk_rows *
             (slot_bytes + kSlotInfoBytes) +
         4 * rows + CeilDiv(rows * kSparseColdFilterBytesPerHotRow, 8) * 8 +
         SparseIndexBytes(SparseIndexCapacity(rows));
}

std::string Mib(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

int64_t SparseSlotBytes(int dim, int64_t state_floats) {
  return kSlotMetaBytes + 4 * (static_cast<int64_t>(dim) + state_floats);
}

int64_t SparseIndexCapacity(int64_t hot_rows) {
  if (hot_rows <= 0) return 0;
  // At least 15 entries: a table of one group (capacity 15 or less) grows
  // instead of cleaning its tombstones.
  return HashCapacityFor(std::max<int64_t>(CeilDiv(hot_rows * 32, 25) + 1, 15));
}

int64_t SparseIndexBytes(int64_t capacity) {
  return capacity <= 0 ? 0 : capacity * kSparseIndexBytesPerCapacity + 17;
}

SparseHotPlan PlanSparseHotRows(int64_t cap_bytes, int64_t slot_bytes) {
  SparseHotPlan plan;
  const int64_t per = slot_bytes + kSlotInfoBytes;
  while (plan.chunk_log2 < kMaxChunkLog2 &&
         (int64_t{2} << plan.chunk_log2) * per * 16 <= cap_bytes) {
    ++plan.chunk_log2;
  }
  const int64_t chunk_rows = int64_t{1} << plan.chunk_log2;
  int64_t lo = 0;
  int64_t hi = std::max<int64_t>(0, cap_bytes / per);
  while (lo < hi) {  // The largest rows with PlanBytes(rows) <= cap_bytes.
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (PlanBytes(mid, chunk_rows, slot_bytes) <= cap_bytes) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  plan.hot_rows = lo;
  plan.bytes = PlanBytes(lo, chunk_rows, slot_bytes);
  return plan;
}

int64_t SparseNeedBytes(int64_t rows, int64_t slot_bytes) {
  if (rows <= 0) return 0;
  // With chunks of 4,096 slots; a share this large plans chunks no larger
  // (PlanSparseHotRows), so it holds at least `rows`.
  return PlanBytes(rows, kUnlimitedChunkRows, slot_bytes);
}

int64_t SparseTierDiskBytesPerRow(int dim, int64_t state_floats) {
  const int64_t raw = kTierKeyBytes + SparseSlotBytes(dim, state_floats) +
                      kTierEntryOverheadBytes;
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(raw) * kTierSpaceAmplification));
}

int64_t SparseSnapshotBytesPerRow(int dim, int64_t state_floats) {
  return 24 + 4 * (static_cast<int64_t>(dim) + state_floats);
}

std::vector<int64_t> SparseBudgetShares(int64_t budget_bytes,
                                        const std::vector<double>& weights) {
  // Max-min fair (water-filling): every table the same share, a table that
  // needs less gets its need, and what those leave is split again among the
  // others, until the rest all need more than an equal share.
  std::vector<int64_t> shares(weights.size(), 0);
  std::vector<size_t> open;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] > 0) open.push_back(i);
  }
  if (open.empty()) {
    for (int64_t& share : shares) {
      share = budget_bytes / static_cast<int64_t>(weights.size());
    }
    return shares;
  }
  int64_t left = budget_bytes;
  while (!open.empty()) {
    const int64_t equal = left / static_cast<int64_t>(open.size());
    std::vector<size_t> still_open;
    for (size_t i : open) {
      const auto need = static_cast<int64_t>(std::ceil(weights[i]));
      if (need <= equal) {
        shares[i] = need;
        left -= need;
      } else {
        still_open.push_back(i);
      }
    }
    if (still_open.size() == open.size()) {
      for (size_t i : open) shares[i] = equal;
      break;
    }
    open = std::move(still_open);
  }
  return shares;
}

SparseServerEstimate EstimateSparseServer(const v1::JobSpec& spec,
                                          int64_t total_rows,
                                          int64_t budget_bytes) {
  SparseServerEstimate out;
  out.num_servers = std::max(1, spec.num_servers());
  out.budget_bytes = budget_bytes;
  const auto& tables = spec.model().sparse_tables();
  double expected_total = 0;
  for (const auto& t : tables) {
    expected_total += static_cast<double>(
        t.expected_rows() > 0 ? t.expected_rows() : kDefaultExpectedRows);
  }
  std::vector<double> weights;
  for (const auto& t : tables) {
    SparseTableEstimate& e = out.tables.emplace_back();
    e.name = t.name();
    const auto expected = static_cast<double>(
        t.expected_rows() > 0 ? t.expected_rows() : kDefaultExpectedRows);
    const double rows = total_rows > 0 ? static_cast<double>(total_rows) *
                                             expected / expected_total
                                       : expected;
    e.rows = static_cast<int64_t>(std::ceil(rows / out.num_servers));
    const int64_t state = SparseStateFloatsPerRow(t);
    const int64_t slot = SparseSlotBytes(t.dim(), state);
    e.bytes_per_row =
        slot + (budget_bytes > 0 ? kSparseTierSlotExtraBytes +
                                       kSparseColdFilterBytesPerHotRow
                                 : 0);
    // As the server weighs its tables: the memory of all its expected rows
    // here.
    weights.push_back(static_cast<double>(SparseNeedBytes(
        static_cast<int64_t>(std::ceil(expected / out.num_servers)), slot)));
    e.snapshot_bytes = e.rows * SparseSnapshotBytesPerRow(t.dim(), state);
    const v1::EvictionSpec& ev = t.eviction();
    const int orders =
        ((ev.max_idle_clocks() > 0 || (ev.max_rows_per_server() > 0 &&
                                       ev.policy() != v1::EvictionSpec::LFU))
             ? 1
             : 0) +
        (ev.max_rows_per_server() > 0 && ev.policy() == v1::EvictionSpec::LFU
             ? 1
             : 0);
    e.order_bytes = int64_t{orders} * 16 * e.rows;
  }
  const std::vector<int64_t> shares = SparseBudgetShares(budget_bytes, weights);
  for (int i = 0; i < tables.size(); ++i) {
    SparseTableEstimate& e = out.tables[static_cast<size_t>(i)];
    const auto& t = tables[i];
    const int64_t state = SparseStateFloatsPerRow(t);
    const int64_t slot = SparseSlotBytes(t.dim(), state);
    if (budget_bytes <= 0) {
      e.hot_rows = e.rows;
      e.memory_bytes =
          CeilDiv(e.rows, kUnlimitedChunkRows) * kUnlimitedChunkRows * slot +
          SparseIndexBytes(HashCapacityFor(e.rows));
    } else {
      e.budget_share = shares[static_cast<size_t>(i)];
      const SparseHotPlan plan = PlanSparseHotRows(e.budget_share, slot);
      e.hot_rows = std::min(e.rows, plan.hot_rows);
      e.memory_bytes = plan.bytes;
      e.tier_disk_bytes =
          (e.rows - e.hot_rows) * SparseTierDiskBytesPerRow(t.dim(), state);
    }
    if (e.rows > 0 && e.memory_bytes > 0) {
      e.bytes_per_row = e.memory_bytes / std::max<int64_t>(1, e.hot_rows);
    }
    out.memory_bytes += e.memory_bytes + e.order_bytes;
    out.disk_bytes += e.tier_disk_bytes + e.snapshot_bytes;
  }
  if (budget_bytes > 0 && !tables.empty()) {
    out.memory_bytes += kSparseTierFixedBytes;
  }
  return out;
}

std::string FormatSparseEstimate(const SparseServerEstimate& e) {
  std::string out = absl::StrCat(
      "per server (", e.num_servers, " servers), sparse memory budget ",
      e.budget_bytes > 0 ? Mib(e.budget_bytes) : std::string("unlimited"),
      "\n");
  absl::StrAppendFormat(&out, "%-24s %14s %14s %10s %12s %12s %12s\n", "table",
                        "rows", "rows in memory", "bytes/row", "memory",
                        "tier disk", "snapshot");
  for (const SparseTableEstimate& t : e.tables) {
    absl::StrAppendFormat(&out, "%-24s %14d %14d %10d %12s %12s %12s\n", t.name,
                          t.rows, t.hot_rows, t.bytes_per_row,
                          Mib(t.memory_bytes + t.order_bytes),
                          Mib(t.tier_disk_bytes), Mib(t.snapshot_bytes));
  }
  absl::StrAppend(&out, "memory: ", Mib(e.memory_bytes),
                  e.budget_bytes > 0
                      ? absl::StrCat(" (rows within the budget, plus ",
                                     Mib(kSparseTierFixedBytes),
                                     " for the tier's RocksDB and write queue)")
                      : std::string(),
                  ", plus the server's fixed overhead (docs/sparse.md)\n",
                  "disk:   ", Mib(e.disk_bytes),
                  " (the tier's cold rows and one snapshot)\n");
  return out;
}

}  // namespace ps

// The counter-based random numbers of sparse tables (docs/sparse.md, "Rows,
// optimizers, admission and eviction"): a row's initial values and the
// admission draw are pure functions of their inputs (a splitmix64 mix of the
// tuple), so every server, log replay and restart computes the same ones,
// whatever rows it holds and in whatever order it meets them.
#ifndef PS_SERVER_SPARSE_ROW_INIT_H_
#define PS_SERVER_SPARSE_ROW_INIT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/v1/job.pb.h"
#include "server/sparse_row_init_simd.h"

namespace ps {

// A row's initial values: SparseInit with its default scale resolved.
// Immutable after Create; thread-safe.
class SparseRowInit {
 public:
  // `init` as in the spec (scale 0: the documented default, 1/sqrt(dim) for
  // UNIFORM, 0.01 for NORMAL); `dim` 1 to 1024. INVALID_ARGUMENT for a
  // negative or non-finite scale or an unknown kind.
  static absl::StatusOr<SparseRowInit> Create(const v1::SparseInit& init,
                                              int dim, uint64_t job_seed,
                                              uint32_t table_index);

  // Writes row `id`'s dim initial values to out[0..dim). Value i is a
  // function of (job_seed, table_index, id, i) alone. UNIFORM rows are
  // computed by path()'s kernel (vectorized where the CPU allows; the same
  // bits on every path); NORMAL rows one value at a time.
  void Fill(uint64_t id, std::span<float> out) const;

  // The kernel of UNIFORM rows: SparseFillBestPath() unless WithPath chose.
  SparseFillPath path() const { return path_; }

  // A copy that computes UNIFORM rows with `path` (for tests and
  // benchmarks: every path gives the same bits). `path` must be available
  // (SparseFillPathAvailable); aborts otherwise.
  SparseRowInit WithPath(SparseFillPath path) const;

  // True when every row starts at zero (ZEROS, or a zero resolved scale).
  bool zeros() const { return kind_ == v1::SparseInit::ZEROS || scale_ == 0; }

 private:
  SparseRowInit(v1::SparseInit::Kind kind, double scale, uint64_t stream,
                int dim);

  v1::SparseInit::Kind kind_;
  double scale_;
  uint64_t stream_;  // Mix of (job_seed, table_index).
  SparseFillPath path_;
  // SparseMix64(i) for i < dim: value i's hash is SparseMix64(row ^ this),
  // which is SparseHashCombine(row, i) with its index half computed once.
  std::vector<uint64_t> index_mix_;
};

// The splitmix64 finalizer: a bijection of 64-bit words that mixes every
// input bit into every output bit.
uint64_t SparseMix64(uint64_t x);

// Combines `word` into the running hash `h` (order matters).
uint64_t SparseHashCombine(uint64_t h, uint64_t word);

// A uniform double in [0, 1) from the top 53 bits of `bits`.
double SparseUnitDouble(uint64_t bits);

// The admission draw of AdmissionSpec.probability: true when the uniform
// number of (job_seed, table_index, id, clock) is below `probability`.
bool SparseAdmissionDraw(uint64_t job_seed, uint32_t table_index, uint64_t id,
                         int64_t clock, double probability);

}  // namespace ps

#endif  // PS_SERVER_SPARSE_ROW_INIT_H_

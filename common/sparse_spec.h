// The sparse part of a job spec (model.sparse_tables, the CTR model's data):
// documented defaults, validation, and the expected load of a table's
// buckets that the shard map balances (docs/sparse.md, "The job spec:
// tables, optimizers, admission, eviction").
#ifndef PS_COMMON_SPARSE_SPEC_H_
#define PS_COMMON_SPARSE_SPEC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/criteo_format.h"
#include "common/sparse_keys.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Longest sparse table name, in bytes.
inline constexpr int kMaxSparseTableNameBytes = 256;
// Largest row (SparseTableSpec.dim), in float32 values.
inline constexpr int32_t kMaxSparseDim = 1024;
// Buckets per server a table gets when its spec leaves num_buckets unset.
inline constexpr int64_t kDefaultBucketsPerServer = 64;
// Most buckets over all of a job's tables: the shard map lists every one and
// travels in every heartbeat reply (about 20 bytes an entry, so 20 MiB).
inline constexpr int64_t kMaxBucketsPerJob = int64_t{1} << 20;
// Most buckets over all of a job's tables that the defaults give (as many as
// the dense blocks a job may have: a map of about 1.3 MiB).
inline constexpr int64_t kMaxDefaultBucketsPerJob = 65536;
// SparseTableSpec.expected_rows when the spec leaves it 0.
inline constexpr int64_t kDefaultExpectedRows = 1000000;
// Largest SparseTableSpec.expected_rows (2^40, about 10^12 rows): keeps every
// bucket load and their sum within int64.
inline constexpr int64_t kMaxExpectedRows = int64_t{1} << 40;

// The num_buckets a table of a job with `num_servers` servers (clamped to
// [1, 1024]) and `num_tables` tables gets when its spec leaves it unset:
// kDefaultBucketsPerServer per server rounded up to a power of two, at most
// kMaxBucketsPerTable, and at most the largest power of two that keeps
// num_tables such tables within kMaxDefaultBucketsPerJob (at least 1).
// Thread-safe.
int32_t DefaultNumBuckets(int num_servers, int num_tables);

// Float32 values of optimizer state a row of `table` carries beside its dim
// values: SGD 0, Adagrad dim, row-wise Adagrad 1, lazy Adam 2 * dim + 1
// (the moments and the row's step count), FTRL 2 * dim (z and n); 0 when no
// optimizer is set. Thread-safe.
int64_t SparseStateFloatsPerRow(const v1::SparseTableSpec& table);

// The expected load of one bucket of `table` (BlockPlacement.num_elems):
// ceil(expected_rows / num_buckets) * (dim + SparseStateFloatsPerRow), for a
// table after ApplySparseDefaults and ValidateSparseSpec (0 for num_buckets
// < 1; expected_rows 0 counts as kDefaultExpectedRows). Thread-safe.
int64_t BucketLoad(const v1::SparseTableSpec& table);

// Fills the documented defaults of each sparse table's unset fields:
// num_buckets (DefaultNumBuckets of spec.num_servers and the table count),
// expected_rows (kDefaultExpectedRows), init.kind UNIFORM and init.scale
// (UNIFORM 1/sqrt(dim), NORMAL 0.01), the optimizer's (Adagrad and row-wise
// Adagrad epsilon 1e-10; lazy Adam beta1 0.9, beta2 0.999, epsilon 1e-8;
// FTRL beta 1) and eviction.policy LRU when max_rows_per_server is set.
// A value already set is never changed, so applying it twice changes
// nothing. Called by ApplyJobSpecDefaults. Thread-compatible.
void ApplySparseDefaults(v1::JobSpec* spec);

// OK if the sparse part of `spec` (after ApplySparseDefaults) is valid:
// sparse tables only in CTR (at least one) and EXTERNAL models, at most
// kMaxSparseTables; each table's name unique, 1 to 256 bytes of printable
// ASCII without spaces; dim 1 to 1024; init kind UNIFORM, NORMAL or ZEROS with
// a scale >= 0 (ZEROS: 0); an optimizer (SGD without momentum or weight
// decay, Adagrad, row-wise Adagrad, lazy Adam without weight decay, FTRL)
// with learning rates > 0, betas in [0, 1), epsilons > 0, other
// coefficients >= 0; admission min_count >= 0 or probability in [0, 1], not
// both; eviction values >= 0; num_buckets a power of two, 1 to 2^20, and at
// most kMaxBucketsPerJob over all tables; expected_rows 0 to 2^40. A CTR
// model reads CRITEO data (input_dim 13, ctr.num_fields 26), CRITEO data
// feeds only a CTR model; jobs with sparse tables refuse local SGD,
// accumulation_steps > 1 and (CTR) labels_per_worker. The CTR model's
// dense shapes are ModelTensors' to check. Errors: INVALID_ARGUMENT whose
// message starts with the field's path, e.g.
// "model.sparse_tables[2].optimizer.lazy_adam.weight_decay: must be 0 ...".
absl::Status ValidateSparseSpec(const v1::JobSpec& spec);

}  // namespace ps

#endif  // PS_COMMON_SPARSE_SPEC_H_

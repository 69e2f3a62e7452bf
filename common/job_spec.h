// Job specs: JSON parsing (Protobuf's JSON mapping), defaults and validation.
#ifndef PS_COMMON_JOB_SPEC_H_
#define PS_COMMON_JOB_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_layout.h"
#include "google/protobuf/message.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Largest block size a job gets when its spec leaves block_elems unset, in
// float32 values: 1 MiB, the fastest message size for gRPC on loopback
// (docs/architecture.md). A model with one server gets exactly this.
inline constexpr int32_t kDefaultBlockElems = 262144;
// Most parts ConsistencySpec.pipeline_parts may cut a step's push into.
inline constexpr int32_t kMaxPipelineParts = 64;
// Blocks per server that a derived block size aims at (DeriveBlockElems).
inline constexpr int64_t kBlocksPerServer = 16;
// A derived block size is a multiple of this many values (1 KiB).
inline constexpr int64_t kBlockAlignElems = 256;
// Most servers, and most workers, one job may ask for.
inline constexpr int32_t kMaxNodesPerJob = 1024;
// Most blocks in one job's model (its shard map lists every one).
inline constexpr int64_t kMaxBlocksPerJob = 65536;
// Largest batch per worker.
inline constexpr int32_t kMaxBatchSize = 1 << 20;
// Longest data set path.
inline constexpr size_t kMaxPathBytes = 4096;

// Longest job or node id.
inline constexpr size_t kMaxIdBytes = 64;

// OK if `id` is a job or node id: 1 to kMaxIdBytes of [A-Za-z0-9._-].
// INVALID_ARGUMENT whose message starts with `field` otherwise. Every RPC
// that names a job or node checks it first, so that no message echoes
// arbitrary bytes.
absl::Status ValidateId(absl::string_view field, absl::string_view id);

// True if `text` holds a character that would forge or disguise a log line
// or a table where it is shown: a C0 control (below U+0020: NUL, newline,
// escape...), DEL, a C1 control (U+0080 to U+009F, NEL U+0085 among them),
// the line and paragraph separators U+2028 and U+2029, or a bidirectional
// embedding, override or isolate (U+202A to U+202E, U+2066 to U+2069),
// UTF-8 encoded. Names (jobs, sweeps) are refused with one.
bool HasUnsafeDisplayChar(absl::string_view text);

// Parses `message` from JSON (Protobuf's JSON mapping). Unknown fields are
// errors. Errors: INVALID_ARGUMENT "<what> is not valid JSON for <type>: ..."
// with the parser's message.
absl::Status MessageFromJson(const std::string& json, absl::string_view what,
                             google::protobuf::Message* message);

// Parses a JobSpec from JSON. Unknown fields are errors, so a misspelt option
// is never silently ignored. Errors: INVALID_ARGUMENT with the parser's
// message.
absl::StatusOr<v1::JobSpec> JobSpecFromJson(const std::string& json);

// Reads a JobSpec from the JSON file at `path` (JobSpecFromJson), as psctl
// submit reads one; no defaults applied, nothing validated. Thread-safe.
// Errors: NOT_FOUND "cannot read <path>"; INVALID_ARGUMENT "<path>: " and
// JobSpecFromJson's message.
absl::StatusOr<v1::JobSpec> JobSpecFromFile(const std::string& path);

// Renders a spec as JSON (for psctl and logs).
std::string JobSpecToJson(const v1::JobSpec& spec);

// The block size of a job with `num_servers` servers whose spec leaves
// block_elems unset: the model's values over num_servers * kBlocksPerServer,
// rounded up to a multiple of kBlockAlignElems, at most kDefaultBlockElems
// (and exactly that for one server). Blocks no larger than 1/16 of a server's
// fair share let the planner's largest-first placement keep every server
// within 1/16 of its share (docs/architecture.md, "Model, blocks and the
// shard map"). A pure function: the coordinator derives it once and writes it
// into the spec that servers and workers receive. Thread-safe.
int32_t DeriveBlockElems(const std::vector<TensorSpec>& tensors,
                         int num_servers);

// Fills the documented defaults of unset fields (block_elems, derived from
// the model and num_servers by DeriveBlockElems, or kDefaultBlockElems when
// the model is missing or invalid; consistency model, durability,
// non_finite_gradients, activation, the optimizer's: ApplyOptimizerDefaults;
// the sparse tables': ApplySparseDefaults).
void ApplyJobSpecDefaults(v1::JobSpec* spec);

// Checks a spec (after ApplyJobSpecDefaults), including the hard limits above
// (nodes, blocks, batch size, path lengths) and the sparse tables
// (ValidateSparseSpec). Errors: INVALID_ARGUMENT whose
// message starts with the offending field's path, e.g. "batch_size: must be >=
// 1".
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Bytes of float32 parameters in `tensors` (ModelTensors of a valid spec).
int64_t ModelBytes(const std::vector<TensorSpec>& tensors);

// Staleness bound that a consistency spec means: 0 for BSP, the bound for SSP,
// and kAsyncStaleness for ASP.
inline constexpr int64_t kAsyncStaleness = int64_t{1} << 40;
int64_t EffectiveStaleness(const v1::ConsistencySpec& consistency);

}  // namespace ps

#endif  // PS_COMMON_JOB_SPEC_H_

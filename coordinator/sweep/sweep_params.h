// Setting a sweep parameter on a job spec by its field path ("batch_size",
// "optimizer.adamw.learning_rate") through Protobuf reflection. Pure
// functions; thread-safe.
#ifndef PS_COORDINATOR_SWEEP_PARAMS_H_
#define PS_COORDINATOR_SWEEP_PARAMS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ps/v1/job.pb.h"
#include "ps/v1/sweep.pb.h"

namespace ps {

// What a path names: the kind of value it takes.
enum class SweepFieldKind {
  kReal,     // float, double: numbers.
  kInteger,  // int32, int64, uint32, uint64: integral numbers.
  kBool,     // numbers 0 and 1.
  kEnum,     // texts: a value's name.
  kString,   // texts.
  kMessage,  // texts: the message's JSON.
};

// The kind of the singular JobSpec field `path` names. INVALID_ARGUMENT,
// starting with `field`, for an empty path, an unknown field name (naming it
// and the message it was looked up in), a repeated field, or a path that goes
// on through a field that is not a message.
absl::StatusOr<SweepFieldKind> ResolveSweepPath(absl::string_view field,
                                                absl::string_view path);

// True if the kind takes numbers (values, range), false if texts (choices).
bool TakesNumbers(SweepFieldKind kind);

// Sets `assignment.path` on `spec` to its value, selecting oneof members on
// the way. INVALID_ARGUMENT, starting with `field`, for a path as
// ResolveSweepPath refuses it, a number where a text is needed or the
// reverse, a non-integral or out-of-range number for an integer field, a bool
// other than 0 or 1, an unknown enum name, or JSON that does not parse as the
// message.
absl::Status SetSweepValue(absl::string_view field,
                           const v1::SweepAssignment& assignment,
                           v1::JobSpec* spec);

// "path=value" for messages and tables: numbers with up to 6 significant
// digits, texts as they are.
std::string FormatAssignment(const v1::SweepAssignment& assignment);

}  // namespace ps

#endif  // PS_COORDINATOR_SWEEP_PARAMS_H_

// Applying one pushed block's gradient with the job's optimizer, straight
// from the bytes it arrived in where the optimizer allows.
#ifndef PS_SERVER_GRADIENT_APPLY_H_
#define PS_SERVER_GRADIENT_APPLY_H_

#include <cstdint>
#include <span>

#include "common/parameter_wire.h"
#include "ps/v1/job.pb.h"
#include "server/optimizer.h"

namespace ps {

// Applies the gradient `data` (one block's values in `encoding`: FP32, FP16
// or BF16, as many as `values` holds) to `values` and `state` at
// `learning_rate`, and counts the update (++*step). A range-wise optimizer
// takes it a run at a time from the wire (decoded to float32 on the way);
// one that is not (LAMB) gets the whole block decoded first. The caller has
// checked the sizes and the encoding. Thread-compatible (the block's
// caller holds its lock).
void ApplyPushedGradient(const Optimizer& optimizer, const WireBytes& data,
                         v1::Precision encoding, std::span<float> values,
                         std::span<float> state, int64_t* step,
                         float learning_rate);

}  // namespace ps

#endif  // PS_SERVER_GRADIENT_APPLY_H_

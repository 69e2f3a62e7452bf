// Evaluates a trained model (from `psctl export` or JobService.ExportModel) on
// a labelled data set with the same code the workers use.
#ifndef PS_CLIENT_MODEL_EVAL_H_
#define PS_CLIENT_MODEL_EVAL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/idx_reader.h"
#include "ps/v1/job.pb.h"

namespace ps {

// What EvaluateModel measured.
struct ModelEvaluation {
  int64_t correct = 0;  // Samples whose argmax prediction equals the label.
  int64_t samples = 0;  // Samples evaluated.
  // correct / samples computed in float, exactly as worker 0 computes the
  // job's test accuracy, so that the same parameters on the same samples give
  // a bit-identical value.
  float accuracy = 0;
};

// Builds the model of `model.model()` on a single-threaded CPU backend (as
// workers run by default), loads the tensors and counts the correct
// predictions over `data`. Thread-compatible, but sets OpenBLAS's thread count
// (a process-wide setting) to 1.
// Errors: INVALID_ARGUMENT if the tensors do not match the model spec
// (CheckTrainedModel), if the data's sample size is not the model's input_dim,
// if `data` is empty, or if a label is out of range.
absl::StatusOr<ModelEvaluation> EvaluateModel(const v1::TrainedModel& model,
                                              const Dataset& data);

}  // namespace ps

#endif  // PS_CLIENT_MODEL_EVAL_H_

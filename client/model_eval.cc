#include "client/model_eval.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/float_codec.h"
#include "common/model_file.h"
#include "common/status_macros.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/model.h"

namespace ps {

absl::StatusOr<ModelEvaluation> EvaluateModel(const v1::TrainedModel& model,
                                              const Dataset& data) {
  PS_RETURN_IF_ERROR(CheckTrainedModel(model));
  if (model.model().kind() == v1::ModelSpec::EXTERNAL) {
    return absl::InvalidArgumentError(
        "an EXTERNAL model is evaluated in PyTorch, not by psctl: load it "
        "with paramserver (JobClient.export, docs/python.md)");
  }
  if (data.dim != model.model().input_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data set has ", data.dim, " values per sample, but the model's ",
        "input_dim is ", model.model().input_dim()));
  }
  if (data.num_samples < 1) {
    return absl::InvalidArgumentError("the data set has no samples");
  }
  std::unique_ptr<CpuBackend> backend = CpuBackend::Create({.num_threads = 1});
  PS_ASSIGN_OR_RETURN(auto net, Model::Create(model.model(), backend.get()));
  std::vector<std::vector<float>> params(model.tensors_size());
  for (int i = 0; i < model.tensors_size(); ++i) {
    const std::string& bytes = model.tensors(i).data();
    params[i].resize(FloatCount(bytes));
    DecodeFloats(bytes, params[i]);
  }
  PS_RETURN_IF_ERROR(net->SetParameters(params));
  PS_ASSIGN_OR_RETURN(
      auto correct, net->CountCorrect(data.features.data(), data.labels.data(),
                                      data.num_samples));
  ModelEvaluation result;
  result.correct = correct;
  result.samples = data.num_samples;
  // The same expression as Trainer::Evaluate.
  result.accuracy = static_cast<float>(correct) / data.num_samples;
  return result;
}

}  // namespace ps

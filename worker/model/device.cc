#include "worker/model/device.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/model/cpu/cpu_backend.h"
#include "worker/model/cuda/cuda_backend.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads) {
  if (device == "gpu" || (device == "auto" && CudaDeviceCount() > 0)) {
    return CreateCudaBackend({});
  }
  if (device == "cpu" || device == "auto") {
    return std::unique_ptr<Backend>(
        CpuBackend::Create({.num_threads = cpu_threads}));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("must be auto, cpu or gpu, not \"", device, "\""));
}

}  // namespace ps

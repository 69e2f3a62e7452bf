// Choosing the compute backend of a worker: --device auto|cpu|gpu.
#ifndef PS_WORKER_DEVICE_H_
#define PS_WORKER_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/backend.h"

namespace ps {

// The backend for `device`: "cpu" (CpuBackend with `cpu_threads` OpenBLAS
// threads, 0 for OpenBLAS's default), "gpu" (the CUDA backend on device 0)
// or "auto" (the GPU if one is usable, else the CPU).
// Errors: INVALID_ARGUMENT for another `device`; UNAVAILABLE for "gpu" when
// the build has no CUDA backend or there is no usable GPU.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view device,
                                                       int cpu_threads);

}  // namespace ps

#endif  // PS_WORKER_DEVICE_H_

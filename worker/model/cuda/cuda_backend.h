// The CUDA compute backend (docs/compute.md): cuBLAS GEMMs, fused kernels,
// device-resident buffers, pinned staging and two streams.
#ifndef PS_WORKER_CUDA_CUDA_BACKEND_H_
#define PS_WORKER_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/backend.h"

namespace ps {

// Options of CreateCudaBackend.
struct CudaBackendOptions {
  // The CUDA device ordinal (default 0).
  int device = 0;
};

// Whether this build has the CUDA backend (nvcc was found at configure time).
bool CudaBackendBuilt();

// The number of CUDA devices this process can use: 0 when the build has no
// CUDA backend, there is no driver, or there is no GPU.
int CudaDeviceCount();

// Creates a backend on a GPU. GEMMs run on cuBLAS (fp32: cublasSgemm;
// fp16/bf16: the inputs converted on the device, then cublasGemmEx with
// float32 accumulation, on tensor cores); the other kernels are CUDA kernels;
// all work is issued in order on one stream, and CopyToHostAsync copies run
// on a second stream so that they overlap the compute issued after them.
// Host data passes through pinned staging buffers.
// Thread-safety: not thread-safe; it may be used by any one thread at a time.
// Errors: UNAVAILABLE if the build has no CUDA backend or the device does not
// exist; INTERNAL if CUDA or cuBLAS fail to initialise.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options);

}  // namespace ps

#endif  // PS_WORKER_CUDA_CUDA_BACKEND_H_

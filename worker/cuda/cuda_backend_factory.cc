// CreateCudaBackend for both kinds of build: with PS_HAVE_CUDA it calls into
// cuda_backend.cu (which is compiled by nvcc and so kept free of Abseil),
// without it every GPU request is UNAVAILABLE.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_backend.h"

namespace ps {

#ifdef PS_HAVE_CUDA
// Defined in cuda_backend.cu.
int CudaDeviceCountImpl();
std::unique_ptr<Backend> NewCudaBackend(int device, std::string* error);

bool CudaBackendBuilt() { return true; }

int CudaDeviceCount() { return CudaDeviceCountImpl(); }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  const int count = CudaDeviceCount();
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", options.device, " does not exist (",
                     count, " usable device(s): is there a GPU and a driver?)"));
  }
  std::string error;
  std::unique_ptr<Backend> backend = NewCudaBackend(options.device, &error);
  if (backend == nullptr) {
    return absl::InternalError(absl::StrCat("CUDA backend: ", error));
  }
  return backend;
}
#else
bool CudaBackendBuilt() { return false; }

int CudaDeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  return absl::UnavailableError(
      "this build has no CUDA backend (nvcc was not found when it was "
      "configured)");
}
#endif

}  // namespace ps

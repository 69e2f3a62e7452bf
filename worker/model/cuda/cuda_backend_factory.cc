// CreateCudaBackend for both kinds of build. With PS_HAVE_CUDA the backend
// lives in a plugin, libps_cuda_backend.so (cuda_backend.cu, built by nvcc),
// loaded with dlopen the first time a GPU is asked for; without it every GPU
// request is UNAVAILABLE.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/model/cuda/cuda_backend.h"

#ifdef PS_HAVE_CUDA
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <vector>
#endif

namespace ps {

#ifdef PS_HAVE_CUDA
namespace {

constexpr char kPluginName[] = "libps_cuda_backend.so";

// The plugin's entry points (cuda_backend.cu), or why it could not be loaded.
struct CudaPlugin {
  int (*device_count)() = nullptr;
  Backend* (*create)(int device, char* error, size_t error_size) = nullptr;
  std::string error;
};

// The directory of the running executable ("" if unknown).
std::string ExecutableDir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  const std::string exe(path, n);
  return exe.substr(0, exe.rfind('/'));
}

CudaPlugin Load() {
  CudaPlugin plugin;
  // Next to the executable (an installed or bundled layout), where the build
  // put it, then the library search path.
  const std::vector<std::string> candidates = {
      absl::StrCat(ExecutableDir(), "/", kPluginName),
      PS_CUDA_PLUGIN_BUILD_PATH, kPluginName};
  void* handle = nullptr;
  for (const std::string& path : candidates) {
    // RTLD_LOCAL: cuBLAS's symbols stay out of the global namespace.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    absl::StrAppend(&plugin.error, plugin.error.empty() ? "" : "; ", dlerror());
  }
  if (handle == nullptr) return plugin;
  // Never closed: backends made by the plugin run its code until exit.
  plugin.device_count =
      reinterpret_cast<int (*)()>(dlsym(handle, "PsCudaDeviceCount"));
  plugin.create = reinterpret_cast<Backend* (*)(int, char*, size_t)>(
      dlsym(handle, "PsNewCudaBackend"));
  if (plugin.device_count == nullptr || plugin.create == nullptr) {
    plugin.error = absl::StrCat(kPluginName, " lacks its entry points");
    plugin.device_count = nullptr;
    plugin.create = nullptr;
  }
  return plugin;
}

// Loaded once per process; immutable afterwards.
const CudaPlugin& Plugin() {
  static const CudaPlugin* const plugin = new CudaPlugin(Load());
  return *plugin;
}

}  // namespace

bool CudaBackendBuilt() { return true; }

int CudaDeviceCount() {
  const CudaPlugin& plugin = Plugin();
  return plugin.device_count == nullptr ? 0 : plugin.device_count();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  const CudaPlugin& plugin = Plugin();
  if (plugin.create == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot load the CUDA backend: ", plugin.error));
  }
  const int count = plugin.device_count();
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", options.device, " does not exist (", count,
                     " usable device(s): is there a GPU and a driver?)"));
  }
  char error[512] = "";
  Backend* backend = plugin.create(options.device, error, sizeof(error));
  if (backend == nullptr) {
    return absl::InternalError(absl::StrCat("CUDA backend: ", error));
  }
  return std::unique_ptr<Backend>(backend);
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

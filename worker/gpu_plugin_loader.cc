#include "worker/gpu_plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/gpu_plugin.h"

namespace ecps {
namespace {

constexpr const char* kPlugin = "libecps_gpu.so";

std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("ECPS_GPU_PLUGIN"); env != nullptr && *env != '\0') {
    paths.push_back(env);
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back((exe.parent_path() / kPlugin).string());
    paths.push_back((exe.parent_path().parent_path() / "lib" / kPlugin).string());
  }
  return paths;
}

// Loads the plugin once per process; later calls get the same answer.
absl::StatusOr<const gpu::PluginApi*> Plugin() {
  static absl::Mutex mu(absl::kConstInit);
  static const gpu::PluginApi* api = nullptr;
  static std::string* failure = nullptr;
  absl::MutexLock lock(&mu);
  if (api != nullptr) return api;
  if (failure != nullptr) return absl::FailedPreconditionError(*failure);
  std::vector<std::string> tried;
  for (const std::string& path : Candidates()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried.push_back(absl::StrCat(path, ": not there"));
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open for good
    if (handle == nullptr) {
      tried.push_back(absl::StrCat(path, ": ", dlerror()));
      continue;
    }
    auto* entry = reinterpret_cast<const gpu::PluginApi* (*)()>(dlsym(handle, "ecps_gpu_plugin"));
    if (entry == nullptr || entry()->abi != gpu::kPluginAbi) {
      tried.push_back(absl::StrCat(path, ": not a GPU plugin of this ecps build"));
      continue;
    }
    api = entry();
    return api;
  }
  failure = new std::string(
      absl::StrCat("cluster.worker_device: cuda: cannot load the GPU plugin ", kPlugin, " (",
                   absl::StrJoin(tried, "; "),
                   "); it needs CUDA's runtime and cuBLAS on this machine (docs/gpu.md)"));
  return absl::FailedPreconditionError(*failure);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DenseMath>> CreateCudaDenseMath(const DlrmConfig& model,
                                                               int max_batch, int gpus) {
  auto api = Plugin();
  if (!api.ok()) return api.status();
  const int have = (*api)->device_count();
  if (have < gpus) {
    return absl::FailedPreconditionError(
        absl::StrCat("cluster.worker_device: cuda with cluster.gpus_per_worker: ", gpus,
                     ", but this machine has ", have, " usable CUDA device(s)",
                     have == 0 ? " (no GPU, or no NVIDIA driver)" : ""));
  }
  if (gpus > 1 && !(*api)->has_nccl) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cluster.gpus_per_worker: ", gpus, " needs NCCL, and this ecps was built without it"));
  }
  std::string error;
  std::unique_ptr<DenseMath> math = (*api)->create(model, max_batch, gpus, &error);
  if (math == nullptr) return absl::InternalError(absl::StrCat("cuda: ", error));
  return math;
}

}  // namespace ecps

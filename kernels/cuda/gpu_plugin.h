// The entry point of libecps_gpu.so, the plugin that holds the CUDA DenseMath. ecps loads it
// with dlopen only for a worker with cluster.worker_device: cuda (worker/gpu_plugin_loader.h),
// so that the ecps binary, and every role that needs no GPU, runs on machines without cuBLAS,
// NCCL or a driver. Both sides are built together from this header; `abi` guards against a
// plugin left over from another build.
#ifndef ECPS_KERNELS_CUDA_GPU_PLUGIN_H_
#define ECPS_KERNELS_CUDA_GPU_PLUGIN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/dense_math.h"

namespace ecps::gpu {

// 2: DenseMath::SetAbft (a new virtual: the vtable of the plugin's DenseMath changed).
// 3: DenseMath::abft_cleared (another).
inline constexpr int kPluginAbi = 3;

struct PluginApi {
  int abi = kPluginAbi;
  bool has_nccl = false;
  int (*device_count)() = nullptr;
  std::unique_ptr<DenseMath> (*create)(const DlrmConfig& model, int max_batch, int gpus,
                                       std::string* error) = nullptr;
  std::string (*time_all_reduce)(int gpus, int64_t floats, int repeats,
                                 double* median_us) = nullptr;
};

}  // namespace ecps::gpu

// The one symbol ecps looks up in the plugin.
extern "C" const ecps::gpu::PluginApi* ecps_gpu_plugin();

#endif  // ECPS_KERNELS_CUDA_GPU_PLUGIN_H_

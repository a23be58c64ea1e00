#include "kernels/cuda/gpu_plugin.h"

#include "kernels/cuda/cuda_dense_math.h"

extern "C" const ecps::gpu::PluginApi* ecps_gpu_plugin() {
  static const ecps::gpu::PluginApi api = [] {
    ecps::gpu::PluginApi a;
    a.has_nccl = ECPS_HAVE_NCCL != 0;
    a.device_count = &ecps::gpu::CudaDeviceCount;
    a.create = &ecps::gpu::CreateCudaDenseMath;
    a.time_all_reduce = &ecps::gpu::TimeAllReduce;
    return a;
  }();
  return &api;
}

// The CUDA DenseMath for a worker with cluster.worker_device: cuda, from the plugin
// libecps_gpu.so (kernels/cuda/gpu_plugin.h), loaded on first use from, in order:
//   $ECPS_GPU_PLUGIN (a path to the library),
//   the folder of the running ecps binary (the build tree: build/cli),
//   ../lib beside it (the relocatable bundle).
// The plugin needs CUDA's runtime, cuBLAS and (for several GPUs) NCCL on the machine; ecps
// itself does not.
#ifndef ECPS_WORKER_GPU_PLUGIN_LOADER_H_
#define ECPS_WORKER_GPU_PLUGIN_LOADER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/dense_math.h"

namespace ecps {

// FAILED_PRECONDITION saying why when the plugin cannot be loaded (each place tried and what
// the loader said), or the machine has fewer CUDA devices than `gpus`; INTERNAL with CUDA's
// words when the GPUs cannot be set up.
absl::StatusOr<std::unique_ptr<DenseMath>> CreateCudaDenseMath(const DlrmConfig& model,
                                                               int max_batch, int gpus);

}  // namespace ecps

#endif  // ECPS_WORKER_GPU_PLUGIN_LOADER_H_

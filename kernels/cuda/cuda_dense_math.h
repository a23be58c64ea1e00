// The CUDA DenseMath (kernels/dense_math.h) and what the worker asks of CUDA itself. Built
// into the plugin libecps_gpu.so (kernels/cuda/gpu_plugin.h), which only a worker with
// cluster.worker_device: cuda loads, so that ecps itself never needs cuBLAS or NCCL.
//
// What one step does on each GPU (cuda_dense_math.cu; the passes in cuda_model_pass.cu):
//   host -> device, once: the GPU's slice of the batch (dense features, labels, row indices,
//     which samples use which row) and every pulled row and dense parameter, staged through
//     pinned buffers on a copy stream of its own, so that the next batch's copy can overlap
//     this step's compute (Stage before Train);
//   bottom MLP (cuBLASLt GEMMs, bias + ReLU in the epilogue), pooling fused into the
//   interaction's input, the pairwise dots, top MLP, the loss, and all of it backward, each
//   element-wise step one launch of its body in train_kernels.h;
//   the row gradients summed per unique row on the GPU (no atomics: deterministic);
//   with several GPUs: the batch is split in equal slices, and one NCCL all-reduce sums the
//   dense and row gradients before they come back;
//   device -> host, once: the gradients.
// FP32 throughout (no TF32), so that the results stay within float rounding of the CPU's.
#ifndef ECPS_KERNELS_CUDA_CUDA_DENSE_MATH_H_
#define ECPS_KERNELS_CUDA_CUDA_DENSE_MATH_H_

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/dense_math.h"

namespace ecps::gpu {

// Number of usable CUDA devices (0 without a GPU or driver).
int CudaDeviceCount();

// Dense math on GPUs 0..gpus-1 for batches of up to max_batch samples (split across them).
// Null and *error set, saying why, when there are fewer GPUs, NCCL is missing for gpus > 1,
// or a shape is invalid.
std::unique_ptr<DenseMath> CreateCudaDenseMath(const DlrmConfig& model, int max_batch, int gpus,
                                               std::string* error);

// Times NCCL's sum all-reduce of `floats` floats across GPUs 0..gpus-1: the median of
// `repeats` timed runs, in microseconds, in *median_us. Empty string on success.
std::string TimeAllReduce(int gpus, int64_t floats, int repeats, double* median_us);

// A dense optimizer's update on the GPU (kernels/optimizers.h's rules, through the bodies of
// train_kernels.h): the servers apply dense updates today; this is the kernel for an
// optimizer that keeps its tensors on a GPU. Device pointers; `state` holds adagrad's
// accumulators, or adam's m then v (2 * size floats). `step` is 1-based (adam's bias
// correction). Asynchronous on `stream` (a cudaStream_t; nullptr: the default stream).
struct DenseUpdateRule {
  enum Kind { kSgd, kAdagrad, kAdam } kind = kAdam;
  float lr = 0.001f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};
std::string ApplyDenseUpdateAsync(const DenseUpdateRule& rule, int64_t step, int64_t size,
                                  const float* grad, float* weights, float* state, void* stream);

}  // namespace ecps::gpu

#endif  // ECPS_KERNELS_CUDA_CUDA_DENSE_MATH_H_

// The GPU's ABFT checks (docs/abft.md; DenseMath::SetAbft): after a cuBLAS GEMM, the check
// bodies of train_kernels.h launched on the GEMM's stream one after the other (one thread per
// column of A's rows or of C: simple, and deterministic, the sums in the order of the CPU run
// of the same bodies), and the counts of missed and cleared columns kept on the device across
// a step's GEMMs, so that a step costs one copy of two ints back, not a synchronisation per
// GEMM.
// CUDA code: for .cu files only. Never ran on a GPU when written (there was none to run it).
#ifndef ECPS_KERNELS_CUDA_CUDA_ABFT_CUH_
#define ECPS_KERNELS_CUDA_CUDA_ABFT_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/train_kernels.h"

namespace ecps::gpu {

// One GPU's checks; every call on the device current. Empty string, or what failed.
class GpuGemmChecks {
 public:
  // Scratch for GEMMs of inner dimension up to k_max and up to n_max columns.
  std::string Reserve(int k_max, int n_max);
  // Zeroes the counts, on `stream`.
  std::string StartStep(cudaStream_t stream);
  // On `stream`, after the GEMM that wrote g.c (device pointers): flips `flip_bit` of
  // g.c[flip_element] when flip_element >= 0 (the tests' fault seam), then checks g against
  // ColumnBound's bound with p = g.m, confirming a miss by the column's elements
  // (AbftCompareColumnAt), and adds its missed and its cleared columns to the counts.
  std::string Check(const GemmOperands& g, int64_t flip_element, int flip_bit, cudaStream_t stream);
  // Copies the counts to host[0] (missed columns) and host[1] (cleared ones), pinned memory,
  // on `stream`: valid once the stream synchronises.
  std::string CopyCountAsync(int* host, cudaStream_t stream);

 private:
  int k_max_ = 0, n_max_ = 0;
  DeviceArray<double> sums_;  // a_sum, a_sq (k_max each), c_sum, ref, b_norm2 (n_max), a_norm2
  DeviceArray<int> missed_;   // n_max
  DeviceArray<int> count_;    // 2: missed, cleared
};

}  // namespace ecps::gpu

#endif  // ECPS_KERNELS_CUDA_CUDA_ABFT_CUH_

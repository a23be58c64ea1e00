// The CUDA DenseMath's step run on the CPU: the same kernel bodies (train_kernels.h) called
// over every index, the same step plan, and plain loops where the GPU calls cuBLAS. It is
// the reference the GPU tests compare the CUDA one against, and the proof, on a machine
// without a GPU, that the bodies compute DLRM's step (its tests compare it with kernels/dlrm.h).
// Its ABFT (SetAbft) runs the GPU's check bodies on the CPU, in the GPU's order, with the same
// fault seam: the tests of the checks and of the recompute. Slow: for tests only.
#ifndef ECPS_KERNELS_CUDA_BODY_DENSE_MATH_H_
#define ECPS_KERNELS_CUDA_BODY_DENSE_MATH_H_

#include <memory>
#include <string>

#include "kernels/cuda/train_kernels.h"
#include "kernels/dense_math.h"

namespace ecps::gpu {

// `slices` > 1 computes the batch in that many slices, as that many GPUs would, and sums
// their gradients in slice order.
std::unique_ptr<DenseMath> CreateBodyDenseMath(const DlrmConfig& shape, int max_batch, int slices,
                                               std::string* error);

// The GPU's ABFT check of one GEMM whose g.c is computed: the check bodies run on the CPU in
// the order the GPU launches them (cuda_abft.cu).
struct BodyCheck {
  int misses = 0;       // columns that missed the bound and the confirmation
  int cleared = 0;      // columns that missed the bound, every element within its rounding
  double margin = 0.0;  // the largest finite |checksum difference| / bound
};
BodyCheck CheckGemmOnCpu(const GemmOperands& g);

}  // namespace ecps::gpu

#endif  // ECPS_KERNELS_CUDA_BODY_DENSE_MATH_H_

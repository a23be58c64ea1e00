#include "kernels/abft.h"
#include "kernels/cuda/cuda_abft.cuh"

namespace ecps::gpu {

std::string GpuGemmChecks::Reserve(int k_max, int n_max) {
  ECPS_TRY(sums_.Reserve(2 * static_cast<size_t>(k_max) + 3 * static_cast<size_t>(n_max) + 1));
  ECPS_TRY(missed_.Reserve(n_max));
  ECPS_TRY(count_.Reserve(2));
  k_max_ = k_max;
  n_max_ = n_max;
  return "";
}

std::string GpuGemmChecks::StartStep(cudaStream_t stream) {
  if (count_.p == nullptr) return "ABFT: the GPU checks have no scratch (SetAbft first)";
  ECPS_CUDA_TRY(cudaMemsetAsync(count_.p, 0, 2 * sizeof(int), stream));
  return "";
}

std::string GpuGemmChecks::Check(const GemmOperands& g, int64_t flip_element, int flip_bit,
                                 cudaStream_t stream) {
  if (g.m <= 0 || g.n <= 0) return "";
  if (g.k > k_max_ || g.n > n_max_) {
    return "ABFT: a GEMM of " + std::to_string(g.n) + " columns and inner dimension " +
           std::to_string(g.k) + " exceeds the checks' scratch (" + std::to_string(n_max_) + ", " +
           std::to_string(k_max_) + ")";
  }
  double* a_sum = sums_.p;
  double* a_sq = a_sum + k_max_;
  double* c_sum = a_sq + k_max_;
  double* ref = c_sum + n_max_;
  double* b_norm2 = ref + n_max_;
  double* a_norm2 = b_norm2 + n_max_;
  int* missed = missed_.p;
  int* count = count_.p;
  const int n = g.n, k = g.k;
  const double lambda = kAbftLambda;
  if (flip_element >= 0) {
    float* c = g.c;
    ECPS_TRY(
        Launch(1, stream, [=] __device__(int64_t i) { FlipBitAt(i, c, flip_element, flip_bit); }));
  }
  // Each launch reads what the one before wrote: the stream orders them.
  ECPS_TRY(Launch(k, stream, [=] __device__(int64_t i) { AbftSumRowsOfAAt(i, g, a_sum, a_sq); }));
  ECPS_TRY(Launch(1, stream, [=] __device__(int64_t i) { AbftFrobeniusAt(i, k, a_sq, a_norm2); }));
  ECPS_TRY(Launch(n, stream, [=] __device__(int64_t j) {
    AbftColumnSumsAt(j, g, a_sum, c_sum, ref, b_norm2);
  }));
  ECPS_TRY(Launch(n, stream, [=] __device__(int64_t j) {
    AbftCompareColumnAt(j, g, lambda, c_sum, ref, a_norm2, b_norm2, missed);
  }));
  return Launch(1, stream, [=] __device__(int64_t i) { AbftCountMissesAt(i, n, missed, count); });
}

std::string GpuGemmChecks::CopyCountAsync(int* host, cudaStream_t stream) {
  if (count_.p == nullptr) return "ABFT: the GPU checks have no scratch (SetAbft first)";
  ECPS_CUDA_TRY(cudaMemcpyAsync(host, count_.p, 2 * sizeof(int), cudaMemcpyDeviceToHost, stream));
  return "";
}

}  // namespace ecps::gpu

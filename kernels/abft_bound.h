// The ABFT check's tolerances (docs/abft.md derives them), written once for every path: the
// CPU's checks (kernels/abft.cc) and the GPU's check bodies (kernels/cuda/train_kernels.h,
// which the CPU also runs) call them. Plain C++17 with no project include, so that device
// code can call it: __host__ __device__ under nvcc.
#ifndef ECPS_KERNELS_ABFT_BOUND_H_
#define ECPS_KERNELS_ABFT_BOUND_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ECPS_ABFT_BOUND_HD __host__ __device__ inline
#else
#define ECPS_ABFT_BOUND_HD inline
#endif

namespace ecps {

// bound = (lambda u sqrt(2k + 12) (1 + 2ku) + (2p + k + 2) u_d sqrt(p)) ||A_P||_F ||B_:j||_2 + eta
// for a panel of p rows of C = op(A) op(B) with inner dimension k: u = 2^-24 (float),
// u_d = 2^-53, eta = 4 (k + 1) p 2^-126 for denormals flushed to zero; the 12 covers the
// float sums of four rows that the layer checks take of C's columns. `lambda` is
// kAbftLambda (kernels/abft.h) on every path.
ECPS_ABFT_BOUND_HD double AbftColumnBound(double lambda, int p, int k, double a_frobenius,
                                          double b_column_norm) {
  const double kU = 0x1p-24, kUd = 0x1p-53, kFlush = 0x1p-126;
  const double float_part = lambda * kU * sqrt(2.0 * k + 12.0) * (1.0 + 2.0 * k * kU);
  const double double_part = (2.0 * p + k + 2.0) * kUd * sqrt(static_cast<double>(p));
  return (float_part + double_part) * a_frobenius * b_column_norm + 4.0 * (k + 1.0) * p * kFlush;
}

// The deterministic bound on |c - sum_i a_i b_i| for one element c of a float GEMM with inner
// dimension k, against its dot product summed in double: gamma_k = ku / (1 - ku) bounds a
// float dot product of length k in any order, fused or not (Higham, Accuracy and Stability of
// Numerical Algorithms, 3.1), the same in double for the reference; each of the 2k roundings,
// and each input read as zero when it is a denormal, may lose up to 2^-126 times what it
// multiplies when denormals are flushed. `magnitude` = sum_i |a_i b_i|, `inputs` =
// sum_i (|a_i| + |b_i|). A miss of the column bound above is confirmed element by element
// against it (kernels/abft.h ConfirmMiss; the GPU's AbftCompareColumnAt).
ECPS_ABFT_BOUND_HD double AbftElementBound(int k, double magnitude, double inputs) {
  const double kU = 0x1p-24, kUd = 0x1p-53, kFlush = 0x1p-126;
  const double gamma = k * kU / (1.0 - k * kU) + k * kUd / (1.0 - k * kUd);
  return gamma * magnitude + kFlush * (2.0 * k + inputs);
}

// Whether c, an element of a float GEMM, is within AbftElementBound of its dot product
// sum_i a[i * a_step] b[i * b_step] (k terms, summed in double in index order). NaN and
// infinity are not. The confirmation of a missed line on both paths.
ECPS_ABFT_BOUND_HD bool AbftElementWithinRounding(float c, int k, const float* a, int64_t a_step,
                                                  const float* b, int64_t b_step) {
  double exact = 0.0, magnitude = 0.0, inputs = 0.0;
  for (int i = 0; i < k; ++i) {
    const double x = a[i * a_step], y = b[i * b_step];
    exact += x * y;
    magnitude += fabs(x * y);
    inputs += fabs(x) + fabs(y);
  }
  return fabs(c - exact) <= AbftElementBound(k, magnitude, inputs);
}

}  // namespace ecps

#endif  // ECPS_KERNELS_ABFT_BOUND_H_

// A linear layer's global checks with each operand's checksums computed once, in passes the
// layer makes anyway where it can (docs/abft.md, "One pass per operand"). For y = x wᵀ + b,
// dw = dyᵀ x, db = 1ᵀdy, dx = dy w:
//   forward      1ᵀy == (1ᵀx) wᵀ   the column sums of y taken in the bias/ReLU epilogue, those
//                                  of x in one pass that also keeps x's row sums for later;
//   weight grad  dw 1 == dyᵀ (x 1)  row sums (the check of dwᵀ = xᵀ dy by its columns): x 1
//                                  from the forward, dyᵀ (x 1) from the pass over dy that sums
//                                  the bias gradient;
//   input grad   1ᵀdx == (1ᵀdy) w   1ᵀdy from that same pass, (1ᵀdy) w from the pass that sums
//                                  dw's rows.
// Each is CheckedGemm's kGlobal check of its product (the same bound, ColumnBound, with the
// product's own p and k); only where the sums come from differs. A layer uses them when all its
// checked GEMMs are kGlobal (UsesLayerChecksums); one with a panel GEMM is checked GEMM by GEMM.
#ifndef ECPS_KERNELS_ABFT_LAYER_H_
#define ECPS_KERNELS_ABFT_LAYER_H_

#include <vector>

#include "kernels/abft.h"

namespace ecps {

// What a layer's forward leaves for its backward, per slice of the batch (one per layer and
// workspace: not shared between threads).
struct LayerChecksums {
  // The forward these were computed for; the backward trusts them only for the same operands.
  const float* x = nullptr;
  const float* w = nullptr;
  int batch = 0, in = 0, out = 0;
  double x_frobenius2 = 0;          // ||x||_F^2
  std::vector<double> x_row_sums;   // batch: x 1
  // Set by the previous layer's epilogue when it wrote x (batch x cols): x's column sums are
  // then in k_sums, and x_row_sums and x_frobenius2 hold x's; the forward skips its pass over x.
  const float* x_summed = nullptr;
  int x_summed_batch = 0, x_summed_cols = 0;
  std::vector<double> w_col_norm2;  // in: ||w[:, j]||^2 (the columns of the input grad's B)
  double margin = 0;  // the largest |difference| / bound of the last pass (tests read it)
  // Scratch, kept so that a warm layer allocates nothing.
  std::vector<double> k_sums, ref, got, norm2, ref_dx;
  std::vector<int> missed;
};

// Whether `abft` has the layer checked with the shared checksums.
bool UsesLayerChecksums(const LinearAbft& abft);

// y = x wᵀ + bias (then ReLU when `relu`), bit for bit as unchecked, its GEMM checked; leaves
// in *abft.sums what the backward needs. Misses, once confirmed (ConfirmMiss), are added to
// *abft.misses; those it clears to *abft.cleared.
void CheckedLinearForward(int batch, int in, int out, const float* x, const float* w,
                          const float* bias, bool relu, float* y, const LinearAbft& abft);

// dw, db and (when dx is not null) dx as LinearBackward computes them, bit for bit, both GEMMs
// checked (dx before `relu_mask` zeroes it where the mask is <= 0, when the mask is not null).
// False, with nothing computed, when *abft.sums do not hold this layer's forward for these x
// and w (the caller then checks GEMM by GEMM).
bool CheckedLinearBackward(int batch, int in, int out, const float* x, const float* w,
                           const float* dy, float* dw, float* db, float* dx,
                           const float* relu_mask, const LinearAbft& abft);

}  // namespace ecps

#endif  // ECPS_KERNELS_ABFT_LAYER_H_

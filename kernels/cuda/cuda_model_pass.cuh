// The DLRM's passes on one GPU (cuda_dense_math.h says what a step does): the state a GPU
// keeps for the CUDA DenseMath (Replica, with its input Slots), and the forward and backward
// of its slice of a step over that state, cuBLAS(Lt) for the GEMMs and the bodies of
// train_kernels.h for everything else. cuda_dense_math.cu stages the inputs, runs these on
// every GPU, all-reduces and copies the results back. CUDA code: for .cu files only.
#ifndef ECPS_KERNELS_CUDA_CUDA_MODEL_PASS_CUH_
#define ECPS_KERNELS_CUDA_CUDA_MODEL_PASS_CUH_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#if ECPS_HAVE_NCCL
#include <nccl.h>
#endif

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/abft.h"
#include "kernels/cuda/cuda_abft.cuh"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/step_plan.h"
#include "kernels/cuda/train_kernels.h"

#define ECPS_CUBLAS_TRY(expr)                                                  \
  do {                                                                         \
    const cublasStatus_t ecps_s = (expr);                                      \
    if (ecps_s != CUBLAS_STATUS_SUCCESS) {                                     \
      return std::string(#expr) + ": cuBLAS status " + std::to_string(ecps_s); \
    }                                                                          \
  } while (0)

namespace ecps::gpu {

// cuBLASLt's workspace, per GPU.
inline constexpr size_t kLtWorkspace = size_t{32} << 20;

// A linear layer's forward through cuBLASLt with bias (+ ReLU) in the epilogue, its
// descriptors and algorithm kept for the batch size last seen.
struct LtLayer {
  int batch = -1;
  bool fused = false;  // false: no algorithm fused the epilogue; sgemm + BiasActivationAt
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void Release() {
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    op = nullptr;
    a = b = c = nullptr;
    batch = -1;
  }
};

// A step's inputs on one GPU (one of three slots: two for training steps in flight, one for
// Predict) and the pinned memory they came through.
struct Slot {
  int b0 = 0, b1 = 0;  // the GPU's samples of the batch
  int64_t rows = 0;    // unique rows, all tables
  DeviceArray<float> dense_x, labels, rows_data, params;
  DeviceArray<int32_t> index, occ_samples, row_table;
  DeviceArray<int64_t> row_offset, occ_offset;
  RowUse use;                           // host side, kept for its capacity
  PinnedArray<int32_t> pinned_index;    // the slice's index, then occ_samples, row_table
  PinnedArray<int64_t> pinned_offsets;  // row_offset then occ_offset
  cudaEvent_t copied = nullptr;         // the copy stream finished this slot's copies
};

// One GPU's share of the CUDA DenseMath: its streams and handles, its input slots, and the
// activations and gradients of its slice of a step.
struct Replica {
  int device = 0;
  cudaStream_t compute = nullptr, copy = nullptr;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  DeviceArray<char> lt_workspace;
  std::vector<LtLayer> lt_bottom, lt_top;
  Slot slots[3];
  std::vector<DeviceArray<float>> bottom_act, top_act;
  DeviceArray<float> z, top_in, grad_a, grad_b, dz, d_logits, losses, probs, grads;
  GpuGemmChecks checks;  // ABFT (SetAbft)
#if ECPS_HAVE_NCCL
  ncclComm_t comm = nullptr;
#endif
};

// The passes of the model `plan` over a replica's slot, every kernel and GEMM launched on the
// replica's compute stream without waiting for it. Each returns an empty string, or what
// failed. Only public members because CUDA's extended lambdas must not sit in private
// member functions.
struct ModelPass {
  const ModelPlan& plan;
  // Training's GEMMs are checked (ABFT; r->checks counts the misses), and `injector` (the
  // tests' fault seam; null: none) is asked before each checked GEMM.
  bool abft = false;
  GemmFaultInjector* injector = nullptr;

  // The forward of the slot's samples; its GEMMs checked when `check` (training with ABFT).
  std::string Forward(Replica* r, const Slot& slot, bool check) const;

  // Forward, loss and backward of the replica's slice into r->grads (parameters, then rows).
  std::string Backward(Replica* r, const Slot& slot, float inv_batch, bool want_probs) const;

  // The steps of the two above.

  // y (n x out) = x w^T + bias (ReLU): cuBLASLt with the epilogue fused where an algorithm
  // offers it, else sgemm and the body. With `check` never fused: the check reads the GEMM's
  // own output, before the bias and ReLU.
  std::string LinearForward(Replica* r, LtLayer* lt, const LayerShape& L, int n, const float* x,
                            const float* params, bool check, float* y) const;

  // dw = dy^T x, db = column sums of dy, dx = dy w (when dx is not null); the GEMMs checked
  // when ABFT is on.
  std::string LinearBackward(Replica* r, const LayerShape& L, int n, const float* x,
                             const float* params, const float* dy, float* grads, float* dx) const;

  // The row-major product g through cuBLAS (column-major: C^T = op(B)^T op(A)^T). With
  // `check` (ABFT), the injector is asked before, and its flip and the check are launched
  // after, on the compute stream.
  std::string RunGemm(Replica* r, const GemmOperands& g, int site, bool check) const;
};

}  // namespace ecps::gpu

#endif  // ECPS_KERNELS_CUDA_CUDA_MODEL_PASS_CUH_

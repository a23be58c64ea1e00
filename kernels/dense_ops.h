// CPU building blocks of the DLRM forward and backward passes. Matrices are row-major;
// "batch" is the number of rows. Every function writes (never accumulates into) its outputs,
// allocates nothing of its own and is thread-compatible. Linear layers' GEMMs go to oneDNN's
// dnnl_sgemm where the build found oneDNN (10-30% faster than OpenBLAS's on most of DLRM's
// layer shapes; a whole step 9-26%, bench/worker_bench BM_TrainStep[Heavy]OpenBlas), else to
// OpenBLAS's cblas_sgemm.
#ifndef ECPS_KERNELS_DENSE_OPS_H_
#define ECPS_KERNELS_DENSE_OPS_H_

#include <cstdint>
#include <string>

#include "kernels/abft.h"

namespace ecps {

// While alive, the calling thread's float arithmetic flushes denormal results to zero and
// reads denormal inputs as zero (x86's MXCSR FTZ and DAZ bits; elsewhere it does nothing);
// the destructor restores the previous mode. The dense model runs under one: as training
// converges its gradients reach the denormal range (below 1.2e-38), where a multiply takes a
// microcode assist: without it a step of ECRec's heavy model (bench/worker_bench) averaged
// 4x slower over its first 56 steps, and kept slowing. Values that small change no weight a
// float can tell apart.
class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals();
  ~ScopedFlushDenormals();
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  unsigned saved_ = 0;
};

// The library the linear layers' GEMMs go to. Process-wide; the default is oneDNN when the
// build has it. SetGemmLibrary(kOneDnn) in a build without it returns false and changes
// nothing. Results are deterministic for a given library and thread count, not across them.
enum class GemmLibrary { kOpenBlas, kOneDnn };
bool SetGemmLibrary(GemmLibrary library);
GemmLibrary CurrentGemmLibrary();
const char* GemmLibraryName(GemmLibrary library);

// OpenBLAS picks its kernels from the CPU's model number; on a CPU it does not know (a VM
// that reports a generic model, as here) Debian's 0.3.21 falls back to Prescott's SSE3
// kernels, 4-5x slower than its AVX-512 ones. Returns the OPENBLAS_CORETYPE that would give it
// kernels for what the CPU supports ("SkylakeX" with AVX-512, "Haswell" with AVX2,
// "Sandybridge" with AVX), with the core it chose in `chosen`; empty when its choice already
// uses the widest of those or when OPENBLAS_CORETYPE is set (the choice was the user's). The
// variable is read when OpenBLAS loads, so it must be in the environment before the process
// starts.
std::string OpenBlasCoreAdvice(std::string* chosen);
// The core OpenBLAS runs (its own choice, or OPENBLAS_CORETYPE's); empty if it names none.
std::string OpenBlasCoreName();
// Its parts. The CPU's widest vectors: 3 AVX-512 (F, BW, DQ, VL), 2 AVX2 and FMA, 1 AVX, 0
// none of those. The core for `cpu_level` when OpenBLAS's `chosen` core uses narrower vectors
// (an unknown name counts as none), else empty.
int CpuVectorLevel();
std::string OpenBlasCoreFor(const std::string& chosen, int cpu_level);

// Sets the number of threads inside every later GEMM of this process (>= 1), for either
// library. ecps defaults to 1 (call this once at worker start-up: the worker's cores are
// shared with gRPC threads); returns the number OpenBLAS reports afterwards.
int SetBlasThreads(int threads);

// c (m x n) = op(a) op(b) + beta * c, row-major, op transposing when t*: the GEMM of the
// library SetGemmLibrary chose, on SetBlasThreads' threads.
void Sgemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc);

// y[b][o] = sum_i x[b][i] * w[o][i] + bias[o], then max(., 0) when relu.
// x: batch x in, w: out x in, bias: out, y: batch x out. With `abft`, its forward scheme
// checks the GEMM (before the bias and ReLU) and adds its misses to *abft->misses.
void LinearForward(int batch, int in, int out, const float* x, const float* w, const float* bias,
                   bool relu, float* y, const LinearAbft* abft = nullptr);

// Backward of y = x w^T + bias given dy = dL/dy (batch x out):
// dw = dy^T x (out x in), db = column sums of dy (out), dx = dy w (batch x in; skipped when
// dx is null). With `abft`, its weight_grad and input_grad schemes check the two GEMMs. With
// `relu_mask` (the ReLU output x came from), dx is then zeroed where it is <= 0, as
// ReluBackwardInPlace(batch * in, relu_mask, dx) does (the check of dx reads it on the way).
void LinearBackward(int batch, int in, int out, const float* x, const float* w, const float* dy,
                    float* dw, float* db, float* dx, const LinearAbft* abft = nullptr,
                    const float* relu_mask = nullptr);

// dy[i] = 0 where y[i] <= 0 (y is the ReLU's output).
void ReluBackwardInPlace(int64_t n, const float* y, float* dy);

// y[b][o] += bias[o], then max(., 0) when relu, for b < batch: the epilogue of a GEMM with
// beta 0 (LinearForward's, and the checked layers' row blocks).
void BiasActivation(int batch, int out, const float* bias, bool relu, float* y);

// out[index[i * index_stride] * dim + k] += src[i * src_stride + k] for i = 0..n-1 in order,
// k < dim: the scatter-add of embedding-bag gradients into their unique rows.
void ScatterAddRows(int64_t n, const int32_t* index, int64_t index_stride, const float* src,
                    int64_t src_stride, int dim, float* out);

// Number of strictly-lower-triangle pairs of `vectors` vectors: vectors*(vectors-1)/2.
inline int InteractionPairs(int vectors) { return vectors * (vectors - 1) / 2; }

// Floats of scratch the interaction needs (either direction), for any batch.
int64_t InteractionScratchFloats(int vectors, int dim);

// Pairwise dot interaction of `vectors` vectors of `dim` floats per sample: vector 0 of
// sample b is first + b*dim (first: batch x dim, the bottom MLP's output), vector v > 0 is
// rest + (b*(vectors-1) + v-1)*dim (rest: batch x (vectors-1) x dim, the pooled embeddings).
// For each sample writes the dot products <z_i, z_j> for i = 1..vectors-1, j = 0..i-1 (in
// that order) to out + b*out_stride; each dot adds its products in k order. scratch:
// InteractionScratchFloats(vectors, dim) floats.
void InteractionForward(int batch, int vectors, int dim, const float* first, const float* rest,
                        float* out, int out_stride, float* scratch);

// Backward of InteractionForward: from d_out (same layout as out) the gradients of the
// vectors, in first's and rest's layouts: d_first (batch x dim) and d_rest. dz_v's element k
// sums g(v, j) * z_j[k] over j != v in ascending j. scratch as above.
void InteractionBackward(int batch, int vectors, int dim, const float* first, const float* rest,
                         const float* d_out, int d_out_stride, float* d_first, float* d_rest,
                         float* scratch);

// Binary cross-entropy on logits, numerically stable. Returns the mean loss over the batch;
// d_logits[b] = (sigmoid(logit_b) - label_b) / batch (the gradient of the MEAN loss);
// probs[b] = sigmoid(logit_b) when probs is not null. d_logits may be null.
float BceWithLogits(int batch, const float* logits, const float* labels, float* d_logits,
                    float* probs);

// The same for one slice of a larger batch: returns the slice's summed loss (in double) and
// writes d_logits[b] = (sigmoid(logit_b) - label_b) * inv_batch, inv_batch being 1 / the
// whole batch's size.
double BceWithLogitsSum(int batch, const float* logits, const float* labels, float inv_batch,
                        float* d_logits, float* probs);

}  // namespace ecps

#endif  // ECPS_KERNELS_DENSE_OPS_H_

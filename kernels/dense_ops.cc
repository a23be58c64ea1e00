#include "kernels/dense_ops.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#ifdef ECPS_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
// libgomp's, the OpenMP runtime oneDNN runs on (cmake/EcpsDeps.cmake); declared here, as the
// OpenMP API defines it, since Clang's omp.h belongs to another runtime.
extern "C" void omp_set_num_threads(int num_threads);
#endif

#include "kernels/abft_layer.h"
#include "kernels/cpu_dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define ECPS_HAVE_MXCSR 1
#endif

namespace ecps {

#ifdef ECPS_HAVE_MXCSR
ScopedFlushDenormals::ScopedFlushDenormals() : saved_(_mm_getcsr()) {
  constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
}
ScopedFlushDenormals::~ScopedFlushDenormals() { _mm_setcsr(saved_); }
#else
ScopedFlushDenormals::ScopedFlushDenormals() = default;
ScopedFlushDenormals::~ScopedFlushDenormals() = default;
#endif

namespace {

std::atomic<int> blas_threads{1};
#ifdef ECPS_HAVE_DNNL
std::atomic<GemmLibrary> gemm_library{GemmLibrary::kOneDnn};
#else
std::atomic<GemmLibrary> gemm_library{GemmLibrary::kOpenBlas};
#endif

}  // namespace

void Sgemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
#ifdef ECPS_HAVE_DNNL
  if (gemm_library.load(std::memory_order_relaxed) == GemmLibrary::kOneDnn) {
    // oneDNN threads through OpenMP, whose team size is a per-thread setting: each calling
    // thread (the step's, the model's helpers) sets its own before its first call and
    // whenever SetBlasThreads changes it.
    thread_local int team = 0;
    const int want = blas_threads.load(std::memory_order_relaxed);
    if (team != want) omp_set_num_threads(team = want);
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

bool SetGemmLibrary(GemmLibrary library) {
#ifndef ECPS_HAVE_DNNL
  if (library == GemmLibrary::kOneDnn) return false;
#endif
  gemm_library.store(library);
  return true;
}

GemmLibrary CurrentGemmLibrary() { return gemm_library.load(); }

const char* GemmLibraryName(GemmLibrary library) {
  return library == GemmLibrary::kOneDnn ? "oneDNN" : "OpenBLAS";
}

int CpuVectorLevel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return 3;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  return __builtin_cpu_supports("avx") ? 1 : 0;
}

std::string OpenBlasCoreFor(const std::string& chosen, int cpu_level) {
  // The widest vectors each OpenBLAS x86-64 core's kernels use, on CpuVectorLevel's scale.
  static constexpr std::pair<const char*, int> kCoreLevels[] = {
      {"SkylakeX", 3},    {"Cooperlake", 3}, {"SapphireRapids", 3}, {"Haswell", 2},
      {"Zen", 2},         {"Sandybridge", 1}, {"Bulldozer", 1},     {"Piledriver", 1},
      {"Steamroller", 1}, {"Excavator", 1}};
  int core_level = 0;
  for (const auto& [name, level] : kCoreLevels) {
    if (chosen == name) core_level = level;
  }
  static constexpr const char* kCoreFor[] = {"", "Sandybridge", "Haswell", "SkylakeX"};
  return core_level < cpu_level ? kCoreFor[std::clamp(cpu_level, 0, 3)] : "";
}

std::string OpenBlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

std::string OpenBlasCoreAdvice(std::string* chosen) {
  *chosen = OpenBlasCoreName();
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  return OpenBlasCoreFor(*chosen, CpuVectorLevel());
}

int SetBlasThreads(int threads) {
  blas_threads.store(std::max(1, threads));
  openblas_set_num_threads(std::max(1, threads));
  return openblas_get_num_threads();
}

namespace {

// y[b][o] = y[b][o] + bias[o], then max(., 0) when relu: the epilogue of a GEMM with beta 0.
ECPS_CLONES void BiasActivationImpl(int batch, int out, const float* __restrict bias, bool relu,
                                    float* __restrict y) {
  for (int b = 0; b < batch; ++b) {
    float* row = y + static_cast<int64_t>(b) * out;
    if (relu) {
      for (int o = 0; o < out; ++o) {
        const float v = row[o] + bias[o];
        row[o] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int o = 0; o < out; ++o) row[o] += bias[o];
    }
  }
}

ECPS_CLONES void ReluImpl(int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

ECPS_CLONES void ReluBackwardImpl(int64_t n, const float* __restrict y, float* __restrict dy) {
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

ECPS_CLONES void ScatterAddRowsImpl(int64_t n, const int32_t* index, int64_t index_stride,
                                    const float* src, int64_t src_stride, int dim, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float* __restrict g = out + static_cast<int64_t>(index[i * index_stride]) * dim;
    const float* __restrict d = src + i * src_stride;
    for (int k = 0; k < dim; ++k) g[k] += d[k];
  }
}

// db[o] = sum over b, in order, of dy[b][o].
ECPS_CLONES void ColumnSumsImpl(int batch, int out, const float* __restrict dy,
                                float* __restrict db) {
  std::fill(db, db + out, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* row = dy + static_cast<int64_t>(b) * out;
    for (int o = 0; o < out; ++o) db[o] += row[o];
  }
}

// A checked GEMM's confirmed misses and cleared alarms, where the layer counts them.
void CountChecks(const AbftResult& result, const LinearAbft& abft) {
  *abft.misses += result.misses;
  if (abft.cleared != nullptr) *abft.cleared += result.cleared;
}

}  // namespace

void LinearForward(int batch, int in, int out, const float* x, const float* w, const float* bias,
                   bool relu, float* y, const LinearAbft* abft) {
  if (batch <= 0) return;
  if (abft != nullptr && UsesLayerChecksums(*abft)) {
    CheckedLinearForward(batch, in, out, x, w, bias, relu, y, *abft);
    return;
  }
  if (abft != nullptr && abft->forward != AbftScheme::kNone) {
    // The checksums hold for the GEMM alone: it writes y (beta 0), the bias and ReLU follow.
    const GemmCall g{false, true, batch, out, in, x, in, w, in, y, out};
    CountChecks(CheckedGemm(g, abft->forward, abft->site, abft->injector), *abft);
    BiasActivationImpl(batch, out, bias, relu, y);
    return;
  }
  if (CurrentGemmLibrary() == GemmLibrary::kOneDnn) {
    // oneDNN writes C without reading it when beta = 0; the bias joins the ReLU's pass.
    Sgemm(false, true, batch, out, in, x, in, w, in, 0.0f, y, out);
    BiasActivationImpl(batch, out, bias, relu, y);
    return;
  }
  // OpenBLAS zeroes C in a pass of its own for beta = 0: seed it with the bias instead and
  // accumulate onto it (beta = 1).
  for (int b = 0; b < batch; ++b)
    std::memcpy(y + static_cast<int64_t>(b) * out, bias, sizeof(float) * out);
  Sgemm(false, true, batch, out, in, x, in, w, in, 1.0f, y, out);
  if (relu) ReluImpl(static_cast<int64_t>(batch) * out, y);
}

void LinearBackward(int batch, int in, int out, const float* x, const float* w, const float* dy,
                    float* dw, float* db, float* dx, const LinearAbft* abft,
                    const float* relu_mask) {
  const LinearAbft none;
  const LinearAbft& checks = abft != nullptr ? *abft : none;
  if (UsesLayerChecksums(checks) &&
      CheckedLinearBackward(batch, in, out, x, w, dy, dw, db, dx, relu_mask, checks)) {
    return;
  }
  const GemmCall dw_gemm{true, false, out, in, batch, dy, out, x, in, dw, in};
  if (checks.weight_grad != AbftScheme::kNone) {
    CountChecks(CheckedGemm(dw_gemm, checks.weight_grad, checks.site + 1, checks.injector), checks);
  } else {
    Sgemm(true, false, out, in, batch, dy, out, x, in, 0.0f, dw, in);
  }
  ColumnSumsImpl(batch, out, dy, db);
  if (dx == nullptr) return;
  const GemmCall dx_gemm{false, false, batch, in, out, dy, out, w, in, dx, in};
  if (checks.input_grad != AbftScheme::kNone) {
    CountChecks(CheckedGemm(dx_gemm, checks.input_grad, checks.site + 2, checks.injector), checks);
  } else {
    Sgemm(false, false, batch, in, out, dy, out, w, in, 0.0f, dx, in);
  }
  if (relu_mask != nullptr) ReluBackwardImpl(static_cast<int64_t>(batch) * in, relu_mask, dx);
}

void ReluBackwardInPlace(int64_t n, const float* y, float* dy) { ReluBackwardImpl(n, y, dy); }

void BiasActivation(int batch, int out, const float* bias, bool relu, float* y) {
  BiasActivationImpl(batch, out, bias, relu, y);
}

void ScatterAddRows(int64_t n, const int32_t* index, int64_t index_stride, const float* src,
                    int64_t src_stride, int dim, float* out) {
  ScatterAddRowsImpl(n, index, index_stride, src, src_stride, dim, out);
}

namespace {

// The interaction's kernels, one clone per instruction set (cpu_dispatch.h). Both keep
// their running sums in arrays of kLanes floats that the vectoriser holds in registers, and
// every sum adds in an order fixed by the code, not by the instruction set, so every clone
// gives the same bits (and so do the GPU bodies, kernels/cuda/train_kernels.h).

constexpr int kLanes = 16;

// kLanes floats as one value (GCC's and Clang's vector extension): each clone lowers it to
// one AVX-512 register, two AVX2 ones or four SSE ones, element-wise IEEE either way. Plain
// arrays of 16 leave the vectoriser splitting the sums into odd widths.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

// By pointer, not by value: a vector this wide by value has a different ABI per instruction
// set (GCC's -Wpsabi).
inline void LoadLanes(Lanes* v, const float* p) { std::memcpy(v, p, sizeof(*v)); }
inline void StoreLanes(float* p, const Lanes& v) { std::memcpy(p, &v, sizeof(v)); }

int RoundUpToLanes(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Rows of the interaction's matrices computed together: four independent running sums keep
// the adder busy where one sum's chain of dependent adds would leave it waiting.
constexpr int kRows = 4;

// Vector j of one sample: the first (j = 0) or one of the rest.
inline const float* Vector(const float* first, const float* rest, int j, int dim) {
  return j == 0 ? first : rest + static_cast<int64_t>(j - 1) * dim;
}

// Forward, one sample at a time: its vectors are transposed into zt (dim x P, P = vectors
// rounded up to kLanes, the padding lanes zero), so that the dots of vector i with the
// vectors j0..j0+15 are kLanes running sums over k: acc[l] += z_i[k] * zt[k][j0 + l]. No
// horizontal sums, and each dot adds its products in k order. Rows past the last (when
// kRows does not divide the count) repeat the last row and store nothing.
ECPS_CLONES void InteractionForwardImpl(int batch, int vectors, int dim, const float* first,
                                        const float* rest, float* out, int out_stride,
                                        float* zt) {
  const int64_t rest_size = static_cast<int64_t>(vectors - 1) * dim;
  const int P = RoundUpToLanes(vectors);
  for (int k = 0; k < dim; ++k) std::fill(zt + k * P + vectors, zt + (k + 1) * P, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* z0 = first + static_cast<int64_t>(b) * dim;
    const float* zr = rest + b * rest_size;
    for (int j = 0; j < vectors; ++j) {
      const float* zj = Vector(z0, zr, j, dim);
      for (int k = 0; k < dim; ++k) zt[k * P + j] = zj[k];
    }
    float* o = out + static_cast<int64_t>(b) * out_stride;
    for (int j0 = 0; j0 + 1 < vectors; j0 += kLanes) {
      for (int i0 = j0 + 1; i0 < vectors; i0 += kRows) {  // the rows i > j0
        const float* r[kRows];
        for (int q = 0; q < kRows; ++q) r[q] = Vector(z0, zr, std::min(i0 + q, vectors - 1), dim);
        Lanes acc[kRows] = {};
        const float* t = zt + j0;
        for (int k = 0; k < dim; ++k, t += P) {
          Lanes tk;
          LoadLanes(&tk, t);
          for (int q = 0; q < kRows; ++q) acc[q] += r[q][k] * tk;
        }
        for (int q = 0; q < kRows && i0 + q < vectors; ++q) {
          const int i = i0 + q, n = std::min(kLanes, i - j0);
          float* oi = o + i * (i - 1) / 2 + j0;
          for (int l = 0; l < kLanes; ++l) {  // a masked store, not a call to memcpy
            if (l < n) oi[l] = acc[q][l];
          }
        }
      }
    }
  }
}

// Backward, one sample at a time: dz_v = sum over j != v, ascending, of g(v, j) * z_j, g
// being the dots' gradients made symmetric (s = vectors x vectors). Each kLanes-wide piece
// of dz_v is one running sum, written once (no zeroing, no read-modify-write of dz); kRows
// rows v at a time share each load of z_j.
ECPS_CLONES void InteractionBackwardImpl(int batch, int vectors, int dim, const float* first,
                                         const float* rest, const float* d_out,
                                         int d_out_stride, float* d_first, float* d_rest,
                                         float* s) {
  const int64_t rest_size = static_cast<int64_t>(vectors - 1) * dim;
  for (int b = 0; b < batch; ++b) {
    const float* z0 = first + static_cast<int64_t>(b) * dim;
    const float* zr = rest + b * rest_size;
    float* dz0 = d_first + static_cast<int64_t>(b) * dim;
    float* dzr = d_rest + b * rest_size;
    auto out_row = [&](int v) { return v == 0 ? dz0 : dzr + static_cast<int64_t>(v - 1) * dim; };
    const float* g = d_out + static_cast<int64_t>(b) * d_out_stride;
    for (int i = 1; i < vectors; ++i) {
      for (int j = 0; j < i; ++j) s[i * vectors + j] = s[j * vectors + i] = *g++;
    }
    for (int v0 = 0; v0 < vectors; v0 += kRows) {
      const int rows = std::min(kRows, vectors - v0);
      const float* sv[kRows];
      for (int q = 0; q < kRows; ++q) sv[q] = s + std::min(v0 + q, vectors - 1) * vectors;
      // Only j in [v0, mid_end) can be one of the rows' own v: the loop over j is split so
      // that the other j run without the test (one loop with it is 3-8% slower).
      const int mid_end = std::min(v0 + kRows, vectors);
      int k0 = 0;
      for (; k0 + kLanes <= dim; k0 += kLanes) {
        Lanes acc[kRows] = {};
        for (int j = 0; j < v0; ++j) {
          Lanes zj;
          LoadLanes(&zj, Vector(z0, zr, j, dim) + k0);
          for (int q = 0; q < kRows; ++q) acc[q] += sv[q][j] * zj;
        }
        for (int j = v0; j < mid_end; ++j) {
          Lanes zj;
          LoadLanes(&zj, Vector(z0, zr, j, dim) + k0);
          for (int q = 0; q < kRows; ++q) {
            if (j != v0 + q) acc[q] += sv[q][j] * zj;
          }
        }
        for (int j = mid_end; j < vectors; ++j) {
          Lanes zj;
          LoadLanes(&zj, Vector(z0, zr, j, dim) + k0);
          for (int q = 0; q < kRows; ++q) acc[q] += sv[q][j] * zj;
        }
        for (int q = 0; q < rows; ++q) StoreLanes(out_row(v0 + q) + k0, acc[q]);
      }
      for (int q = 0; q < rows && k0 < dim; ++q) {  // the last dim % kLanes floats
        const int v = v0 + q, n = dim - k0;
        float acc[kLanes] = {};
        for (int j = 0; j < vectors; ++j) {
          if (j == v) continue;
          const float* zj = Vector(z0, zr, j, dim) + k0;
          for (int l = 0; l < n; ++l) acc[l] += sv[q][j] * zj[l];
        }
        float* d = out_row(v) + k0;
        for (int l = 0; l < n; ++l) d[l] = acc[l];
      }
    }
  }
}

}  // namespace

int64_t InteractionScratchFloats(int vectors, int dim) {
  return std::max(static_cast<int64_t>(dim) * RoundUpToLanes(vectors),
                  static_cast<int64_t>(vectors) * vectors);
}

void InteractionForward(int batch, int vectors, int dim, const float* first, const float* rest,
                        float* out, int out_stride, float* scratch) {
  InteractionForwardImpl(batch, vectors, dim, first, rest, out, out_stride, scratch);
}

void InteractionBackward(int batch, int vectors, int dim, const float* first, const float* rest,
                         const float* d_out, int d_out_stride, float* d_first, float* d_rest,
                         float* scratch) {
  InteractionBackwardImpl(batch, vectors, dim, first, rest, d_out, d_out_stride, d_first, d_rest,
                          scratch);
}

float BceWithLogits(int batch, const float* logits, const float* labels, float* d_logits,
                    float* probs) {
  if (batch <= 0) return 0.0f;
  const double total =
      BceWithLogitsSum(batch, logits, labels, 1.0f / static_cast<float>(batch), d_logits, probs);
  return static_cast<float>(total / batch);
}

double BceWithLogitsSum(int batch, const float* logits, const float* labels, float inv,
                        float* d_logits, float* probs) {
  double total = 0.0;
  for (int b = 0; b < batch; ++b) {
    const float z = logits[b], y = labels[b];
    // loss = max(z, 0) - z*y + log(1 + exp(-|z|))
    total += std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::fabs(z)));
    const float p = z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
    if (d_logits != nullptr) d_logits[b] = (p - y) * inv;
    if (probs != nullptr) probs[b] = p;
  }
  return total;
}

}  // namespace ecps

#include "kernels/dense_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

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

int SetBlasThreads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
  return openblas_get_num_threads();
}

void LinearForward(int batch, int in, int out, const float* x, const float* w, const float* bias,
                   bool relu, float* y) {
  if (batch <= 0) return;
  // Seed y with the bias so sgemm accumulates onto it (beta = 1): one pass fewer.
  for (int b = 0; b < batch; ++b)
    std::memcpy(y + static_cast<int64_t>(b) * out, bias, sizeof(float) * out);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x, in, w, in, 1.0f, y,
              out);
  if (relu) {
    const int64_t n = static_cast<int64_t>(batch) * out;
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
  }
}

void LinearBackward(int batch, int in, int out, const float* x, const float* w, const float* dy,
                    float* dw, float* db, float* dx) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1.0f, dy, out, x, in, 0.0f,
              dw, in);
  std::fill(db, db + out, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* row = dy + static_cast<int64_t>(b) * out;
    for (int o = 0; o < out; ++o) db[o] += row[o];
  }
  if (dx != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out, 1.0f, dy, out, w, in,
                0.0f, dx, in);
  }
}

void ReluBackwardInPlace(int64_t n, const float* y, float* dy) {
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

namespace {

// The interaction's kernels, one clone per instruction set (cpu_dispatch.h). Sums run in 16
// fixed lanes whatever the instruction set, so every clone adds in the same order.

constexpr int kLanes = 16;

// a . b over n floats: lanes of 16, then the rest.
inline float Dot(const float* __restrict a, const float* __restrict b, int n) {
  float lane[kLanes] = {};
  int k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += a[k + l] * b[k + l];
  }
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += lane[l];
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

// yi += g * xj and yj += g * xi over n floats (four distinct rows).
inline void CrossAxpy(float g, const float* __restrict xi, const float* __restrict xj,
                      float* __restrict yi, float* __restrict yj, int n) {
  for (int k = 0; k < n; ++k) {
    yi[k] += g * xj[k];
    yj[k] += g * xi[k];
  }
}

ECPS_CLONES void InteractionForwardImpl(int batch, int vectors, int dim, const float* z,
                                        float* out, int out_stride) {
  const int64_t sample = static_cast<int64_t>(vectors) * dim;
  for (int b = 0; b < batch; ++b) {
    const float* zb = z + b * sample;
    float* o = out + static_cast<int64_t>(b) * out_stride;
    for (int i = 1; i < vectors; ++i) {
      const float* zi = zb + i * dim;
      for (int j = 0; j < i; ++j) *o++ = Dot(zi, zb + j * dim, dim);
    }
  }
}

ECPS_CLONES void InteractionBackwardImpl(int batch, int vectors, int dim, const float* z,
                                         const float* d_out, int d_out_stride, float* dz) {
  const int64_t sample = static_cast<int64_t>(vectors) * dim;
  std::fill(dz, dz + batch * sample, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* zb = z + b * sample;
    float* dzb = dz + b * sample;
    const float* g = d_out + static_cast<int64_t>(b) * d_out_stride;
    for (int i = 1; i < vectors; ++i) {
      for (int j = 0; j < i; ++j) {
        CrossAxpy(*g++, zb + i * dim, zb + j * dim, dzb + i * dim, dzb + j * dim, dim);
      }
    }
  }
}

}  // namespace

void InteractionForward(int batch, int vectors, int dim, const float* z, float* out,
                        int out_stride) {
  InteractionForwardImpl(batch, vectors, dim, z, out, out_stride);
}

void InteractionBackward(int batch, int vectors, int dim, const float* z, const float* d_out,
                         int d_out_stride, float* dz) {
  InteractionBackwardImpl(batch, vectors, dim, z, d_out, d_out_stride, dz);
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

// CUDA kernels of the erasure code (see gf_cuda.h). C++17; no absl/spdlog headers.
#include <cuda_runtime.h>

#include <algorithm>

#include "codec/cuda/gf_cuda.h"
#include "codec/cuda/gf_math.h"

namespace ecps::codec::cuda {
namespace {

// Coefficients per launch: they are staged in shared memory.
constexpr int kMaxCoefsPerLaunch = 32 * 1024;
constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 8192;

__device__ __forceinline__ uint32_t LoadWord(const uint8_t* p, size_t left, bool full) {
  if (full) return *reinterpret_cast<const uint32_t*>(p);
  uint32_t v = 0;
  const int n = left < 4 ? static_cast<int>(left) : 4;
  for (int b = 0; b < n; ++b) v |= static_cast<uint32_t>(p[b]) << (8 * b);
  return v;
}

__device__ __forceinline__ void StoreWord(uint8_t* p, uint32_t v, size_t left, bool full) {
  if (full) {
    *reinterpret_cast<uint32_t*>(p) = v;
    return;
  }
  const int n = left < 4 ? static_cast<int>(left) : 4;
  for (int b = 0; b < n; ++b) p[b] = static_cast<uint8_t>(v >> (8 * b));
}

// One thread per 4-byte word (grid-stride); every row of that word, all sources.
__global__ void GfMatrixKernel(const uint8_t* __restrict__ coef, int rows, int cols,
                               const uint8_t* __restrict__ src, size_t src_stride,
                               uint8_t* __restrict__ dst, size_t dst_stride, size_t len,
                               bool accumulate, bool aligned) {
  extern __shared__ uint8_t s_coef[];
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) s_coef[i] = coef[i];
  __syncthreads();
  const size_t words = (len + 3) / 4;
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t w = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words;
       w += step) {
    const size_t off = w * 4;
    const size_t left = len - off;
    const bool full = aligned && left >= 4;
    for (int q = 0; q < rows; ++q) {
      uint8_t* d = dst + q * dst_stride + off;
      uint32_t acc = accumulate ? LoadWord(d, left, full) : 0u;
      const uint8_t* c = s_coef + q * cols;
      for (int j = 0; j < cols; ++j) {
        acc ^= GfMulWord(c[j], LoadWord(src + j * src_stride + off, left, full));
      }
      StoreWord(d, acc, left, full);
    }
  }
}

bool Aligned4(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 3) == 0; }

}  // namespace

const char* ErrorName(Error e) {
  switch (e) {
    case Error::kOk:
      return "ok";
    case Error::kNoDevice:
      return "no CUDA device";
    case Error::kInvalidArgument:
      return "invalid argument";
    case Error::kCuda:
      return "CUDA error";
  }
  return "unknown";
}

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return n;
}

Error GfMatrixApplyAsync(const uint8_t* d_coef, int rows, int cols, const uint8_t* d_src,
                         size_t src_stride, uint8_t* d_dst, size_t dst_stride, size_t len,
                         bool accumulate, void* stream) {
  if (rows < 1 || cols < 1 || rows > 255 || cols > 255 || d_coef == nullptr || d_src == nullptr ||
      d_dst == nullptr) {
    return Error::kInvalidArgument;
  }
  if (len == 0) return Error::kOk;
  const bool aligned =
      Aligned4(d_src) && Aligned4(d_dst) && src_stride % 4 == 0 && dst_stride % 4 == 0;
  const size_t words = (len + 3) / 4;
  const unsigned blocks =
      static_cast<unsigned>(std::min(kMaxBlocks, (words + kThreads - 1) / kThreads));
  const int rows_per_launch = std::max(1, kMaxCoefsPerLaunch / cols);
  auto s = static_cast<cudaStream_t>(stream);
  for (int q0 = 0; q0 < rows; q0 += rows_per_launch) {
    const int n = std::min(rows_per_launch, rows - q0);
    const size_t shared = static_cast<size_t>(n) * cols;
    if (shared > 48 * 1024) {
      if (cudaFuncSetAttribute(GfMatrixKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(shared)) != cudaSuccess) {
        return Error::kCuda;
      }
    }
    GfMatrixKernel<<<blocks, kThreads, shared, s>>>(
        d_coef + static_cast<size_t>(q0) * cols, n, cols, d_src, src_stride,
        d_dst + q0 * dst_stride, dst_stride, len, accumulate, aligned);
    if (cudaGetLastError() != cudaSuccess) return Error::kCuda;
  }
  return Error::kOk;
}

Error HostStagedCoder::Create(std::unique_ptr<HostStagedCoder>* out) {
  if (out == nullptr) return Error::kInvalidArgument;
  if (DeviceCount() == 0) return Error::kNoDevice;
  out->reset(new HostStagedCoder());
  return Error::kOk;
}

HostStagedCoder::~HostStagedCoder() {
  if (device_buffer_ != nullptr) cudaFree(device_buffer_);
}

Error HostStagedCoder::Reserve(size_t bytes) {
  if (bytes <= capacity_) return Error::kOk;
  if (device_buffer_ != nullptr) cudaFree(device_buffer_);
  device_buffer_ = nullptr;
  capacity_ = 0;
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return Error::kCuda;
  device_buffer_ = static_cast<uint8_t*>(p);
  capacity_ = bytes;
  return Error::kOk;
}

Error HostStagedCoder::Apply(const uint8_t* coef, int rows, int cols, const uint8_t* const* src,
                             uint8_t* const* dst, size_t len, bool accumulate) {
  if (coef == nullptr || src == nullptr || dst == nullptr || rows < 1 || cols < 1 || rows > 255 ||
      cols > 255) {
    return Error::kInvalidArgument;
  }
  for (int j = 0; j < cols; ++j) {
    if (src[j] == nullptr) return Error::kInvalidArgument;
  }
  for (int q = 0; q < rows; ++q) {
    if (dst[q] == nullptr) return Error::kInvalidArgument;
  }
  if (len == 0) return Error::kOk;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t stride = (len + 255) / 256 * 256;
  const size_t coef_bytes = (static_cast<size_t>(rows) * cols + 255) / 256 * 256;
  if (Error e = Reserve(coef_bytes + stride * (rows + cols)); e != Error::kOk) return e;
  uint8_t* d_coef = device_buffer_;
  uint8_t* d_src = d_coef + coef_bytes;
  uint8_t* d_dst = d_src + stride * cols;
  if (cudaMemcpy(d_coef, coef, static_cast<size_t>(rows) * cols, cudaMemcpyHostToDevice) !=
      cudaSuccess) {
    return Error::kCuda;
  }
  for (int j = 0; j < cols; ++j) {
    if (cudaMemcpy(d_src + j * stride, src[j], len, cudaMemcpyHostToDevice) != cudaSuccess) {
      return Error::kCuda;
    }
  }
  if (accumulate) {
    for (int q = 0; q < rows; ++q) {
      if (cudaMemcpy(d_dst + q * stride, dst[q], len, cudaMemcpyHostToDevice) != cudaSuccess) {
        return Error::kCuda;
      }
    }
  }
  if (Error e = GfMatrixApplyAsync(d_coef, rows, cols, d_src, stride, d_dst, stride, len,
                                   accumulate, nullptr);
      e != Error::kOk) {
    return e;
  }
  for (int q = 0; q < rows; ++q) {
    if (cudaMemcpy(dst[q], d_dst + q * stride, len, cudaMemcpyDeviceToHost) != cudaSuccess) {
      return Error::kCuda;
    }
  }
  return Error::kOk;
}

}  // namespace ecps::codec::cuda

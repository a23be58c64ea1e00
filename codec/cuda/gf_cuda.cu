// CUDA kernels of the erasure code (see gf_cuda.h). C++17; no absl/spdlog headers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

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
  std::unique_ptr<HostStagedCoder> coder(new HostStagedCoder());
  for (Slot& s : coder->slots_) {
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      return Error::kCuda;
    }
    s.stream = stream;
    if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess) {
      return Error::kCuda;
    }
    s.done = done;
  }
  void* coef = nullptr;
  if (cudaMalloc(&coef, 255 * 255) != cudaSuccess) return Error::kCuda;
  coder->device_coef_ = static_cast<uint8_t*>(coef);
  *out = std::move(coder);
  return Error::kOk;
}

HostStagedCoder::~HostStagedCoder() {
  for (Slot& s : slots_) {
    if (s.stream != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(s.stream));
    if (s.pinned_in != nullptr) cudaFreeHost(s.pinned_in);
    if (s.pinned_out != nullptr) cudaFreeHost(s.pinned_out);
    if (s.device != nullptr) cudaFree(s.device);
    if (s.done != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(s.done));
    if (s.stream != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(s.stream));
  }
  if (device_coef_ != nullptr) cudaFree(device_coef_);
}

Error HostStagedCoder::Reserve(int blocks, size_t chunk) {
  const size_t bytes = static_cast<size_t>(blocks) * chunk;
  if (bytes <= slot_bytes_) return Error::kOk;
  for (Slot& s : slots_) {
    if (s.pinned_in != nullptr) cudaFreeHost(s.pinned_in);
    if (s.pinned_out != nullptr) cudaFreeHost(s.pinned_out);
    if (s.device != nullptr) cudaFree(s.device);
    s.pinned_in = s.pinned_out = s.device = nullptr;
  }
  slot_bytes_ = 0;
  for (Slot& s : slots_) {
    void* in = nullptr;
    void* out = nullptr;
    void* dev = nullptr;
    if (cudaMallocHost(&in, bytes) != cudaSuccess) return Error::kCuda;
    s.pinned_in = static_cast<uint8_t*>(in);
    if (cudaMallocHost(&out, bytes) != cudaSuccess) return Error::kCuda;
    s.pinned_out = static_cast<uint8_t*>(out);
    if (cudaMalloc(&dev, bytes) != cudaSuccess) return Error::kCuda;
    s.device = static_cast<uint8_t*>(dev);
  }
  slot_bytes_ = bytes;
  return Error::kOk;
}

Error HostStagedCoder::Finish(Slot* slot, int rows, size_t chunk, uint8_t* const* dst) {
  if (slot->bytes == 0) return Error::kOk;
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(slot->done)) != cudaSuccess) {
    return Error::kCuda;
  }
  for (int q = 0; q < rows; ++q) {
    std::memcpy(dst[q] + slot->offset, slot->pinned_out + q * chunk, slot->bytes);
  }
  slot->bytes = 0;
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
  // Each block's chunk at a 256-byte stride, so every chunk starts aligned for word loads.
  const size_t chunk = (std::min(len, kChunk) + 255) / 256 * 256;
  if (Error e = Reserve(cols + rows, chunk); e != Error::kOk) return e;
  const size_t coef_bytes = static_cast<size_t>(rows) * cols;
  if (coef_on_device_.size() != coef_bytes ||
      std::memcmp(coef_on_device_.data(), coef, coef_bytes) != 0) {
    coef_on_device_.clear();
    if (cudaMemcpy(device_coef_, coef, coef_bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
      return Error::kCuda;
    }
    coef_on_device_.assign(coef, coef + coef_bytes);
  }
  const int in_blocks = cols + (accumulate ? rows : 0);
  Error failed = Error::kOk;
  int next = 0;
  for (size_t offset = 0; offset < len && failed == Error::kOk; offset += chunk, next ^= 1) {
    Slot& s = slots_[next];
    // The slot's previous chunk must be out before its buffers take this one.
    if ((failed = Finish(&s, rows, chunk, dst)) != Error::kOk) break;
    const size_t n = std::min(chunk, len - offset);
    for (int j = 0; j < cols; ++j) std::memcpy(s.pinned_in + j * chunk, src[j] + offset, n);
    if (accumulate) {
      for (int q = 0; q < rows; ++q) {
        std::memcpy(s.pinned_in + (cols + q) * chunk, dst[q] + offset, n);
      }
    }
    auto stream = static_cast<cudaStream_t>(s.stream);
    uint8_t* d_dst = s.device + static_cast<size_t>(cols) * chunk;
    if (cudaMemcpyAsync(s.device, s.pinned_in, static_cast<size_t>(in_blocks) * chunk,
                        cudaMemcpyHostToDevice, stream) != cudaSuccess) {
      failed = Error::kCuda;
      break;
    }
    if ((failed = GfMatrixApplyAsync(device_coef_, rows, cols, s.device, chunk, d_dst, chunk, n,
                                     accumulate, stream)) != Error::kOk) {
      break;
    }
    if (cudaMemcpyAsync(s.pinned_out, d_dst, static_cast<size_t>(rows) * chunk,
                        cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
        cudaEventRecord(static_cast<cudaEvent_t>(s.done), stream) != cudaSuccess) {
      failed = Error::kCuda;
      break;
    }
    s.offset = offset;
    s.bytes = n;
  }
  // Drain both slots (also after a failure, so that no copy is left writing into them).
  for (Slot& s : slots_) {
    if (failed != Error::kOk) {
      cudaStreamSynchronize(static_cast<cudaStream_t>(s.stream));
      s.bytes = 0;
    } else if (Error e = Finish(&s, rows, chunk, dst); e != Error::kOk) {
      failed = e;
    }
  }
  if (failed != Error::kOk) coef_on_device_.clear();
  return failed;
}

}  // namespace ecps::codec::cuda

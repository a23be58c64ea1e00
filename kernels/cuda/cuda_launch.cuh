// What the CUDA side's translation units share (CUDA code: for .cu files only): the error
// macros, the launch of a train_kernels.h body over an index range (the GPU form of
// ForEachIndex), and device and pinned memory that only grows.
#ifndef ECPS_KERNELS_CUDA_CUDA_LAUNCH_CUH_
#define ECPS_KERNELS_CUDA_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#define ECPS_CUDA_TRY(expr)                                          \
  do {                                                               \
    const cudaError_t ecps_e = (expr);                               \
    if (ecps_e != cudaSuccess) {                                     \
      return std::string(#expr) + ": " + cudaGetErrorString(ecps_e); \
    }                                                                \
  } while (0)
#define ECPS_TRY(expr)                      \
  do {                                      \
    std::string ecps_err = (expr);          \
    if (!ecps_err.empty()) return ecps_err; \
  } while (0)

namespace ecps::gpu {

inline constexpr int kThreads = 256;

template <typename Body>
__global__ void IndexKernel(int64_t n, Body body) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) body(i);
}

// One thread per index of [0, n): the GPU form of ForEachIndex.
template <typename Body>
std::string Launch(int64_t n, cudaStream_t stream, Body body) {
  if (n <= 0) return "";
  IndexKernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(n,
                                                                                             body);
  ECPS_CUDA_TRY(cudaGetLastError());
  return "";
}

// Memory that only grows (allocated once per size reached, never per step): device memory,
// or pinned host memory (what the copies go through, so they are true DMA and asynchronous).
enum class Where { kDevice, kPinned };

template <typename T, Where kWhere>
struct GrowingArray {
  T* p = nullptr;
  size_t n = 0;
  GrowingArray() = default;
  GrowingArray(const GrowingArray&) = delete;
  GrowingArray& operator=(const GrowingArray&) = delete;
  GrowingArray(GrowingArray&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  ~GrowingArray() { Free(); }
  void Free() {
    if (p == nullptr) return;
    kWhere == Where::kDevice ? cudaFree(p) : cudaFreeHost(p);
    p = nullptr;
    n = 0;
  }
  std::string Reserve(size_t count) {
    if (count <= n) return "";
    Free();
    void** at = reinterpret_cast<void**>(&p);
    const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
    if (kWhere == Where::kDevice) {
      ECPS_CUDA_TRY(cudaMalloc(at, bytes));
    } else {
      ECPS_CUDA_TRY(cudaMallocHost(at, bytes));
    }
    n = count;
    return "";
  }
};

template <typename T>
using DeviceArray = GrowingArray<T, Where::kDevice>;
template <typename T>
using PinnedArray = GrowingArray<T, Where::kPinned>;

template <typename T>
std::string CopyIn(DeviceArray<T>* dst, const T* src, size_t count, cudaStream_t stream) {
  ECPS_TRY(dst->Reserve(count));
  if (count > 0) {
    ECPS_CUDA_TRY(cudaMemcpyAsync(dst->p, src, count * sizeof(T), cudaMemcpyHostToDevice, stream));
  }
  return "";
}

}  // namespace ecps::gpu

#endif  // ECPS_KERNELS_CUDA_CUDA_LAUNCH_CUH_

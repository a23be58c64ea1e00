// CUDA kernels for the erasure code: encode, update and decode are all one operation,
//   dst[q] (= or ^=) XOR_j M[q][j] * src[j]     (GF(2^8), polynomial 0x11D)
// with M the parity matrix (encode), one column of it with accumulate (update), or a decode
// matrix computed on the host (decode; see codec/codec.cc). Plain C++17, no absl: this
// library builds on a GPU machine that has only nvcc and CMake. Nothing here touches the
// GPU until a function is called.
#ifndef ECPS_CODEC_CUDA_GF_CUDA_H_
#define ECPS_CODEC_CUDA_GF_CUDA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace ecps::codec::cuda {

enum class Error : int {
  kOk = 0,
  kNoDevice = 1,         // no usable GPU or driver
  kInvalidArgument = 2,  // bad sizes or null pointers
  kCuda = 3,             // a CUDA call or kernel launch failed
};

const char* ErrorName(Error e);

// Number of usable CUDA devices; 0 when there is none or no driver. Never fails.
int DeviceCount();

// Device-memory form, asynchronous on `stream` (a cudaStream_t; nullptr for the default
// stream). Block j of the source is d_src + j * src_stride, block q of the output is
// d_dst + q * dst_stride, each len bytes; d_coef holds rows * cols row-major coefficients in
// device memory. 1 <= rows, cols <= 255. Outputs must not overlap inputs.
Error GfMatrixApplyAsync(const uint8_t* d_coef, int rows, int cols, const uint8_t* d_src,
                         size_t src_stride, uint8_t* d_dst, size_t dst_stride, size_t len,
                         bool accumulate, void* stream);

// Host-memory form: stages host blocks through device buffers that it keeps between calls
// (grown on demand). Synchronous; thread-safe (calls are serialised).
class HostStagedCoder {
 public:
  // kNoDevice when there is no GPU.
  static Error Create(std::unique_ptr<HostStagedCoder>* out);
  ~HostStagedCoder();
  HostStagedCoder(const HostStagedCoder&) = delete;
  HostStagedCoder& operator=(const HostStagedCoder&) = delete;

  // dst[q][0..len) (= or ^=) XOR_j coef[q * cols + j] * src[j][0..len), host pointers.
  Error Apply(const uint8_t* coef, int rows, int cols, const uint8_t* const* src,
              uint8_t* const* dst, size_t len, bool accumulate);

 private:
  HostStagedCoder() = default;
  Error Reserve(size_t bytes);

  std::mutex mu_;
  uint8_t* device_buffer_ = nullptr;  // guarded by mu_
  size_t capacity_ = 0;               // guarded by mu_
};

}  // namespace ecps::codec::cuda

#endif  // ECPS_CODEC_CUDA_GF_CUDA_H_

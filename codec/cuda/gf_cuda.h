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
#include <vector>

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

// Host-memory form. Large blocks go through in chunks on two streams, so that while one
// chunk is on the GPU (copy in, kernel, copy out) the host gathers the next into pinned
// memory: the copies are DMA, one each way per chunk whatever the number of blocks, and they
// overlap the kernels. The coefficients go to the GPU once per matrix, not per call.
// Buffers are kept between calls (grown on demand). Synchronous; thread-safe (calls are
// serialised).
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

  // The chunk size (bytes of each block per chunk); exposed for tests.
  static constexpr size_t kChunk = size_t{1} << 20;

 private:
  struct Slot {
    uint8_t* pinned_in = nullptr;   // cols source chunks, then rows destination chunks
    uint8_t* pinned_out = nullptr;  // rows destination chunks
    uint8_t* device = nullptr;      // the same (cols + rows) chunks on the GPU
    void* stream = nullptr;         // cudaStream_t
    void* done = nullptr;           // cudaEvent_t: the chunk's copy out has finished
    size_t offset = 0, bytes = 0;   // the chunk in flight (bytes 0: none)
  };
  HostStagedCoder() = default;
  Error Reserve(int blocks, size_t chunk);
  // Waits for slot's chunk in flight and scatters it to dst.
  Error Finish(Slot* slot, int rows, size_t chunk, uint8_t* const* dst);

  // std::mutex, not absl::Mutex: this header is compiled by nvcc, also where only the CUDA
  // toolkit is installed (no Abseil), so Clang's -Wthread-safety never sees it.
  std::mutex mu_;
  Slot slots_[2];           // guarded by mu_
  size_t slot_bytes_ = 0;   // guarded by mu_: the capacity of each slot's buffers
  uint8_t* device_coef_ = nullptr;  // guarded by mu_: 255 * 255 bytes
  std::vector<uint8_t> coef_on_device_;  // guarded by mu_: what device_coef_ holds
};

}  // namespace ecps::codec::cuda

#endif  // ECPS_CODEC_CUDA_GF_CUDA_H_

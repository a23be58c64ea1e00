// A zero-filled, fixed-size byte buffer for the big row arrays of a server, backed by
// transparent huge pages where the kernel offers them (madvise): rows are touched at random,
// and with 4 KiB pages nearly every row access also misses the TLB. Falls back to ordinary
// pages silently. Move-only.
#ifndef ECPS_RUNTIME_HUGE_BUFFER_H_
#define ECPS_RUNTIME_HUGE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ecps {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // Aborts (std::bad_alloc) when the memory cannot be mapped, like a vector would.
  explicit HugeBuffer(size_t bytes);
  // One buffer for regions of bytes[i] bytes back to back (a store's tables); `starts[i]`
  // gets where region i begins.
  template <typename T>
  static HugeBuffer ForRegions(const std::vector<size_t>& bytes, std::vector<T*>* starts) {
    size_t total = 0;
    for (size_t b : bytes) total += b;
    HugeBuffer buffer(total);
    starts->clear();
    uint8_t* next = buffer.data();
    for (size_t b : bytes) {
      starts->push_back(reinterpret_cast<T*>(next));
      next += b;
    }
    return buffer;
  }
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Release();

  void* map_ = nullptr;  // the whole mapping (padded for alignment)
  size_t map_bytes_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Asks the CPU to bring the cache lines of [p, p + bytes) in ahead of a write (at most the
// first 256 bytes: a row).
inline void PrefetchForWrite(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes && off < 256; off += 64) __builtin_prefetch(c + off, 1, 3);
}

}  // namespace ecps

#endif  // ECPS_RUNTIME_HUGE_BUFFER_H_

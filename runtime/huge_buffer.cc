#include "runtime/huge_buffer.h"

#include <sys/mman.h>

#include <new>
#include <utility>

namespace ecps {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  // Small buffers gain nothing from huge pages; big ones get a 2 MiB-aligned start so that
  // the kernel can back every full 2 MiB of them with one page.
  const size_t pad = bytes >= kHugePage ? kHugePage : 0;
  map_bytes_ = bytes + pad;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::bad_alloc();
  }
  uintptr_t start = reinterpret_cast<uintptr_t>(map_);
  if (pad > 0) {
    start = (start + kHugePage - 1) & ~(kHugePage - 1);
#ifdef MADV_HUGEPAGE
    madvise(reinterpret_cast<void*>(start), bytes, MADV_HUGEPAGE);  // a hint; may be refused
#endif
  }
  data_ = reinterpret_cast<uint8_t*>(start);
}

HugeBuffer::~HugeBuffer() { Release(); }

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept { *this = std::move(other); }

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void HugeBuffer::Release() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ecps

// The per-row "valid" flags of a replacement's stores: written under the row's lock, read
// without it (the replacement checks every row of every request while it rebuilds, and a row
// once valid stays valid), so both sides are atomic.
#ifndef ECPS_PS_VALID_FLAG_H_
#define ECPS_PS_VALID_FLAG_H_

#include <atomic>
#include <cstdint>

namespace ecps {

inline bool FlagSet(const uint8_t& flag) {
  return std::atomic_ref<uint8_t>(const_cast<uint8_t&>(flag)).load(std::memory_order_acquire) != 0;
}

inline void SetFlag(uint8_t& flag) {
  std::atomic_ref<uint8_t>(flag).store(1, std::memory_order_release);
}

}  // namespace ecps

#endif  // ECPS_PS_VALID_FLAG_H_

// The per-row "valid" flags of a replacement's stores: written under the row's lock, read
// without it (the replacement checks every row of every request while it rebuilds, and a row
// once valid stays valid), so both sides are atomic. A byte per flag (FlagSet, SetFlag), or a bit (BitSet, SetBit).
#ifndef ECPS_PS_VALID_FLAG_H_
#define ECPS_PS_VALID_FLAG_H_

#include <atomic>
#include <cstdint>
#include <vector>

namespace ecps {

inline bool FlagSet(const uint8_t& flag) {
  return std::atomic_ref<uint8_t>(const_cast<uint8_t&>(flag)).load(std::memory_order_acquire) != 0;
}

inline void SetFlag(uint8_t& flag) {
  std::atomic_ref<uint8_t>(flag).store(1, std::memory_order_release);
}

// One bit per row, 64 to a word: a table's flags stay in cache (25 KB for 200,000 rows, where
// a byte per row would be 200 KB) although every request tests rows scattered all over it.
// Rows sharing a word are set under different locks, so the set is an atomic or.
inline bool BitSet(const std::vector<uint64_t>& words, int64_t i) {
  const uint64_t word = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(words[i >> 6]))
                            .load(std::memory_order_acquire);
  return (word >> (i & 63)) & 1;
}

inline void SetBit(std::vector<uint64_t>& words, int64_t i) {
  std::atomic_ref<uint64_t>(words[i >> 6]).fetch_or(uint64_t{1} << (i & 63),
                                                   std::memory_order_release);
}

}  // namespace ecps

#endif  // ECPS_PS_VALID_FLAG_H_

// 64-bit hashes of byte strings: XXH64 (Debian's libxxhash), the checksum of the checkpoint
// files (docs/checkpoints.md, "Checksums"). The values are part of the on-disk format: they
// must never change (runtime/hash_test.cc pins them).
#ifndef ECPS_RUNTIME_HASH_H_
#define ECPS_RUNTIME_HASH_H_

#include <cstddef>
#include <cstdint>

namespace ecps {

// XXH64 of `bytes` bytes at `data` with `seed` (byte-compatible with `xxhsum -H64`).
uint64_t Hash64(const void* data, size_t bytes, uint64_t seed);

// XXH64 of data given in pieces: Digest() after any sequence of Update() calls equals
// Hash64 of their concatenation. Not thread-safe.
class Hash64Stream {
 public:
  explicit Hash64Stream(uint64_t seed);
  Hash64Stream(const Hash64Stream&) = delete;
  Hash64Stream& operator=(const Hash64Stream&) = delete;

  void Update(const void* data, size_t bytes);
  uint64_t Digest() const;

 private:
  // libxxhash's XXH64_state_t, held here so that xxhash.h stays out of this header (hash.cc
  // checks the size and alignment).
  alignas(8) unsigned char state_[88];
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_HASH_H_

#include "runtime/hash.h"

#define XXH_STATIC_LINKING_ONLY  // the state's definition, to keep it inline in Hash64Stream
#include <xxhash.h>

namespace ecps {
namespace {

XXH64_state_t* State(unsigned char* storage) { return reinterpret_cast<XXH64_state_t*>(storage); }
const XXH64_state_t* State(const unsigned char* storage) {
  return reinterpret_cast<const XXH64_state_t*>(storage);
}

}  // namespace

uint64_t Hash64(const void* data, size_t bytes, uint64_t seed) { return XXH64(data, bytes, seed); }

Hash64Stream::Hash64Stream(uint64_t seed) {
  static_assert(sizeof(XXH64_state_t) <= sizeof(state_));
  static_assert(alignof(XXH64_state_t) <= 8);
  XXH64_reset(State(state_), seed);
}

void Hash64Stream::Update(const void* data, size_t bytes) {
  // XXH64_update fails only for a null input of non-zero length.
  XXH64_update(State(state_), data, bytes);
}

uint64_t Hash64Stream::Digest() const { return XXH64_digest(State(state_)); }

}  // namespace ecps

// Counter-based random numbers: a value is a pure function of (seed, counters), so any
// sample, row or weight can be regenerated anywhere, in any order, without shared state.
#ifndef ECPS_KERNELS_HASH_RNG_H_
#define ECPS_KERNELS_HASH_RNG_H_

#include <cmath>
#include <cstdint>

namespace ecps {

// SplitMix64 finaliser: a bijective 64-bit mix with full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Hash of an ordered tuple of 64-bit values.
inline uint64_t HashOf(uint64_t a) { return Mix64(a); }
template <typename... Rest>
inline uint64_t HashOf(uint64_t a, uint64_t b, Rest... rest) {
  return HashOf(Mix64(a) ^ (b + 0x632BE59BD9B4E019ull + (a << 6)), static_cast<uint64_t>(rest)...);
}

// Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
inline float UnitFloat(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }
inline double UnitDouble(uint64_t h) {
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// Standard normal from one 64-bit hash (Box-Muller on its two 32-bit halves).
inline double NormalFromHash(uint64_t h) {
  double u1 = (static_cast<double>(h >> 32) + 0.5) * (1.0 / 4294967296.0);
  double u2 = static_cast<double>(h & 0xFFFFFFFFull) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace ecps

#endif  // ECPS_KERNELS_HASH_RNG_H_

// Small helpers over the byte fields of requests (float arrays sent as protobuf bytes).
#ifndef ECPS_PS_WIRE_BYTES_H_
#define ECPS_PS_WIRE_BYTES_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace ecps {

// memcpy of `n` bytes that is also defined for n == 0 (an empty request field: then
// `dst` may be a null vector's data, which memcpy must not be given).
inline void CopyBytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

// The index of the first float in `bytes` that is NaN or infinite, or -1.
inline int64_t FirstNonFinite(const std::string& bytes) {
  const size_t n = bytes.size() / sizeof(float);
  const char* p = bytes.data();
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, p + i * sizeof(float), sizeof(float));
    if (!std::isfinite(v)) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace ecps

#endif  // ECPS_PS_WIRE_BYTES_H_

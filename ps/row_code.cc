#include "ps/row_code.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"

namespace ecps {

absl::StatusOr<std::unique_ptr<RowCode>> RowCode::Create(FaultToleranceMode mode, int k, int r,
                                                         const std::string& backend) {
  if (mode == FaultToleranceMode::kReplication) {
    if (k != 1 || r < 1) {
      return absl::InvalidArgumentError("replication needs k = 1 and r >= 1");
    }
    return std::unique_ptr<RowCode>(new RowCode(k, r, nullptr));
  }
  if (mode != FaultToleranceMode::kErasureCode) {
    return absl::InvalidArgumentError(absl::StrCat("mode '", ToString(mode), "' keeps no parity"));
  }
  auto code = codec::ErasureCode::Create(k, r, backend);
  if (!code.ok()) return code.status();
  return std::unique_ptr<RowCode>(new RowCode(k, r, std::move(*code)));
}

RowCode::RowCode(int k, int r, std::unique_ptr<codec::ErasureCode> code)
    : k_(k), r_(r), code_(std::move(code)), unit_(static_cast<size_t>(k) * r) {
  for (int q = 0; q < r; ++q) {
    for (int j = 0; j < k; ++j) unit_[q * k + j] = code_ == nullptr || code_->coefficient(q, j) == 1;
  }
}

void RowCode::XorInto(uint8_t* out, const uint8_t* in, size_t len) {
  size_t b = 0;
#if defined(__SSE2__)
  // Four registers a step (every x86-64 has SSE2): a 128-byte payload is two steps.
  for (; b + 64 <= len; b += 64) {
    const __m128i x0 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(out + b)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + b)));
    const __m128i x1 =
        _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(out + b + 16)),
                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + b + 16)));
    const __m128i x2 =
        _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(out + b + 32)),
                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + b + 32)));
    const __m128i x3 =
        _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(out + b + 48)),
                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + b + 48)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b), x0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b + 16), x1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b + 32), x2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b + 48), x3);
  }
  for (; b + 16 <= len; b += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b),
                     _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(out + b)),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + b))));
  }
#endif
  for (; b + 8 <= len; b += 8) {
    uint64_t x, y;
    std::memcpy(&x, out + b, 8);
    std::memcpy(&y, in + b, 8);
    x ^= y;
    std::memcpy(out + b, &x, 8);
  }
  for (; b < len; ++b) out[b] ^= in[b];
}

std::string RowCode::backend() const {
  return code_ == nullptr ? "copy" : std::string(code_->backend());
}

absl::Status RowCode::UpdateParitySlow(int q, int j, const uint8_t* delta, uint8_t* parity,
                                       size_t len) const {
  if (code_ != nullptr) return code_->UpdateParity(q, j, delta, parity, len);
  return absl::InvalidArgumentError(absl::StrCat("replica update (q=", q, ", j=", j,
                                                 ") outside r=", r_, ", k=", k_));
}

absl::Status RowCode::Encode(absl::Span<const uint8_t* const> data,
                             absl::Span<uint8_t* const> parity, size_t len) const {
  if (code_ != nullptr) return code_->Encode(data, parity, len);
  if (data.size() != 1 || parity.size() != static_cast<size_t>(r_)) {
    return absl::InvalidArgumentError("replication encodes 1 data member into r copies");
  }
  for (uint8_t* p : parity) std::memcpy(p, data[0], len);
  return absl::OkStatus();
}

absl::Status RowCode::Decode(absl::Span<const int> available_ids,
                             absl::Span<const uint8_t* const> available,
                             absl::Span<const int> wanted_ids, absl::Span<uint8_t* const> out,
                             size_t len) const {
  if (code_ != nullptr) return code_->Decode(available_ids, available, wanted_ids, out, len);
  if (available.empty() || available.size() != available_ids.size() ||
      wanted_ids.size() != out.size()) {
    return absl::InvalidArgumentError("replication decode needs one available copy");
  }
  for (uint8_t* o : out) std::memcpy(o, available[0], len);
  return absl::OkStatus();
}

}  // namespace ecps

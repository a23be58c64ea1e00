// How a stripe's members relate: the erasure code of mode erasure_code (codec/), or plain
// copies for mode replication (k = 1, every "parity" member is a byte-identical replica).
// Immutable and thread-safe.
#ifndef ECPS_PS_ROW_CODE_H_
#define ECPS_PS_ROW_CODE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/codec.h"
#include "runtime/spec.h"

namespace ecps {

class RowCode {
 public:
  // mode: erasure_code (k, r, codec backend) or replication (k must be 1); INVALID_ARGUMENT
  // for a mode that keeps no parity.
  static absl::StatusOr<std::unique_ptr<RowCode>> Create(FaultToleranceMode mode, int k, int r,
                                                         const std::string& backend);

  int k() const { return k_; }
  int r() const { return r_; }
  std::string backend() const;

  // parity_q ^= c[q][j] * delta (replication: parity_q ^= delta). A coefficient of 1 (every
  // one of replication and of r = 1, the first parity row of a Cauchy code) is a plain XOR,
  // done here: a parity holder applies one per row update, and the codec's dispatch and
  // argument checks would cost more than the 128-byte XOR itself.
  absl::Status UpdateParity(int q, int j, const uint8_t* delta, uint8_t* parity,
                            size_t len) const {
    if (q >= 0 && q < r_ && j >= 0 && j < k_ && unit_[q * k_ + j]) {
      XorInto(parity, delta, len);
      return absl::OkStatus();
    }
    return UpdateParitySlow(q, j, delta, parity, len);
  }
  // out[0..len) ^= in[0..len), 16 bytes at a time.
  static void XorInto(uint8_t* out, const uint8_t* in, size_t len);
  // All r parity members from the k data members.
  absl::Status Encode(absl::Span<const uint8_t* const> data, absl::Span<uint8_t* const> parity,
                      size_t len) const;
  // Members `wanted_ids` from at least k available members (ids: 0..k-1 data, k.. parity).
  absl::Status Decode(absl::Span<const int> available_ids,
                      absl::Span<const uint8_t* const> available,
                      absl::Span<const int> wanted_ids, absl::Span<uint8_t* const> out,
                      size_t len) const;

 private:
  RowCode(int k, int r, std::unique_ptr<codec::ErasureCode> code);
  absl::Status UpdateParitySlow(int q, int j, const uint8_t* delta, uint8_t* parity,
                                size_t len) const;
  int k_;
  int r_;
  std::unique_ptr<codec::ErasureCode> code_;  // null: replication
  std::vector<bool> unit_;                    // r x k: coefficient (q, j) is 1
};

}  // namespace ecps

#endif  // ECPS_PS_ROW_CODE_H_

#include "ps/row_code.h"

#include <cstring>

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

std::string RowCode::backend() const {
  return code_ == nullptr ? "copy" : std::string(code_->backend());
}

absl::Status RowCode::UpdateParity(int q, int j, const uint8_t* delta, uint8_t* parity,
                                   size_t len) const {
  if (code_ != nullptr) return code_->UpdateParity(q, j, delta, parity, len);
  for (size_t i = 0; i < len; ++i) parity[i] ^= delta[i];
  return absl::OkStatus();
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

#include "runtime/error_kind.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/types/optional.h"

namespace ecps {
namespace {

constexpr char kKindPayload[] = "type.googleapis.com/ecps.ErrorKind";

constexpr std::string_view kNames[kErrorKindCount] = {"none", "stale_epoch", "replica_behind",
                                                        "unhealthy_worker"};

}  // namespace

std::string_view ErrorKindName(ErrorKind kind) {
  const int i = static_cast<int>(kind);
  return i >= 0 && i < kErrorKindCount ? kNames[i] : kNames[0];
}

ErrorKind ErrorKindNamed(std::string_view name) {
  for (int i = 1; i < kErrorKindCount; ++i) {
    if (kNames[i] == name) return static_cast<ErrorKind>(i);
  }
  return ErrorKind::kNone;
}

absl::Status WithErrorKind(absl::Status status, ErrorKind kind) {
  if (status.ok()) return status;
  if (kind == ErrorKind::kNone) {
    status.ErasePayload(kKindPayload);
  } else {
    const std::string_view name = ErrorKindName(kind);
    status.SetPayload(kKindPayload, absl::Cord(absl::string_view(name.data(), name.size())));
  }
  return status;
}

ErrorKind ErrorKindOf(const absl::Status& status) {
  if (status.ok()) return ErrorKind::kNone;
  const absl::optional<absl::Cord> payload = status.GetPayload(kKindPayload);
  if (!payload.has_value()) return ErrorKind::kNone;
  return ErrorKindNamed(std::string(*payload));
}

}  // namespace ecps

// Typed errors: what a caller may branch on in an error besides its code. A kind rides on the
// absl::Status as a payload (absl::Status::SetPayload), crosses gRPC with it (runtime/rpc.h:
// ToGrpcStatus and FromGrpcStatus carry it in the status's error details, beside the
// AnsweredByPeer mark) and is never read from the message, which is for people.
//
// A kind is added only for a condition some caller acts on and that the code alone does not
// tell apart (FAILED_PRECONDITION means a dozen things). The producer attaches it where the
// condition is decided; the consumer tests it with HasErrorKind. The ctest status_text_check
// (cmake/status_text_check.py) fails on code that branches on a message's text instead.
#ifndef ECPS_RUNTIME_ERROR_KIND_H_
#define ECPS_RUNTIME_ERROR_KIND_H_

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "absl/status/status.h"

namespace ecps {

enum class ErrorKind : uint8_t {
  kNone = 0,  // no kind: the code says all there is
  // A server refused a request whose header names an older epoch than the map it follows
  // (ParameterServerCore::CheckRequest, FAILED_PRECONDITION). The sender is behind: the same
  // request, stamped with the newer epoch once its map has it, may go through.
  kStaleEpoch,
  // A dense replica refused an update that is not the next one of its tensor: it missed one
  // (DenseStore::ApplyReplica, FAILED_PRECONDITION). The primary sends it the whole tensor.
  kReplicaBehind,
  // A worker's checked GEMMs failed their checksums too often (worker.abft_max_detections,
  // TrainingLoop): its machine computes wrongly. It pushes nothing more and is replaced like
  // a dead worker; the job goes on.
  kUnhealthyWorker,
};
// How many kinds there are, kNone included (for sets of kinds).
inline constexpr int kErrorKindCount = 4;

// The kind's name, as it travels ("stale_epoch"); "none" for kNone.
std::string_view ErrorKindName(ErrorKind kind);
// The kind ErrorKindName names `name`; kNone for any other string.
ErrorKind ErrorKindNamed(std::string_view name);

// `status` with `kind` attached (replacing any kind it had). OK stays OK, and kNone removes
// the kind.
absl::Status WithErrorKind(absl::Status status, ErrorKind kind);
// The kind attached to `status`; kNone when none is, and for OK.
ErrorKind ErrorKindOf(const absl::Status& status);
inline bool HasErrorKind(const absl::Status& status, ErrorKind kind) {
  return !status.ok() && ErrorKindOf(status) == kind;
}

// A set of kinds, as bits: cheap to copy, no allocation (RetryPolicy holds one).
class ErrorKindSet {
 public:
  constexpr ErrorKindSet() = default;
  constexpr ErrorKindSet(std::initializer_list<ErrorKind> kinds) {
    for (ErrorKind k : kinds) bits_ |= Bit(k);
  }
  constexpr bool Contains(ErrorKind kind) const {
    return kind != ErrorKind::kNone && (bits_ & Bit(kind)) != 0;
  }
  constexpr bool empty() const { return bits_ == 0; }

 private:
  static constexpr uint32_t Bit(ErrorKind kind) { return uint32_t{1} << static_cast<int>(kind); }
  uint32_t bits_ = 0;
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_ERROR_KIND_H_

#include "runtime/coordinator_term.h"

#include "absl/strings/str_cat.h"

namespace ecps {

absl::Status CoordinatorTermFence::Check(uint64_t term) {
  uint64_t seen = highest_.load();
  while (term > seen && !highest_.compare_exchange_weak(seen, term)) {
  }
  if (term != 0 && term < seen) {
    return absl::FailedPreconditionError(absl::StrCat(
        "coordinator term ", term, " was deposed: term ", seen,
        " took the job over (docs/recovery.md)"));
  }
  return absl::OkStatus();
}

}  // namespace ecps

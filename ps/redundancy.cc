#include "ps/redundancy.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/ecps.pb.h"
#include "ps/wire_bytes.h"

namespace ecps {

absl::Status NoRedundancy::ApplyPush(EmbeddingStore& store,
                                     absl::Span<const EmbeddingStore::Rows> tables,
                                     const v1::PushRequest& push) {
  std::vector<float> grads;
  for (size_t i = 0; i < tables.size(); ++i) {
    const std::string& bytes = push.grads(static_cast<int>(i));
    grads.resize(bytes.size() / sizeof(float));
    CopyBytes(grads.data(), bytes.data(), bytes.size());
    if (absl::Status s = store.Push(tables[i], grads.data()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status NoRedundancy::ApplyDeltas(const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck*) {
  return hooks_.refuse(
      absl::FailedPreconditionError(absl::StrCat(
          "server ", server_, " keeps no parity (fault_tolerance.mode without redundancy)")),
      batch.header(), "parity deltas");
}

absl::Status NoRedundancy::ReplicateDense(const v1::ReplicateDenseRequest& request) {
  return hooks_.refuse(
      absl::FailedPreconditionError(absl::StrCat(
          "server ", server_,
          " keeps no dense replicas (fault_tolerance.mode without redundancy)")),
      request.header(), "a dense replica update");
}

}  // namespace ecps

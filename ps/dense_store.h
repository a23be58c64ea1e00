// Dense parameters (the MLPs) a server is primary of, with their optimizer state.
//
// Dense tensor i has its primary on server i mod S and `replicas` backups on the next servers
// ((i + 1) mod S, ...). Each tensor has its own lock; an update applies the dense optimizer to
// the whole tensor and bumps its version (the 1-based step used for Adam's bias correction).
// The primary ships each applied gradient, in version order, to its replicas, which apply the
// same update with the same code and so stay bit-identical. Thread-safe.
#ifndef ECPS_PS_DENSE_STORE_H_
#define ECPS_PS_DENSE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kernels/optimizers.h"

namespace ecps {

class DenseStore {
 public:
  // `initial` holds every tensor of the model (all servers compute the same deterministic
  // initial values); the store keeps those with index % servers == server.
  DenseStore(const DenseOptimizerConfig& optimizer, int servers, int server,
             std::vector<std::vector<float>> initial, int replicas = 0);

  int num_tensors() const { return static_cast<int>(sizes_.size()); }
  // Floats of tensor `tensor`'s weights (its state may hold more); 0 out of range.
  int64_t Size(int tensor) const {
    return tensor >= 0 && tensor < num_tensors() ? sizes_[tensor] : 0;
  }
  int PrimaryOf(int tensor) const { return tensor % servers_; }
  // The servers holding replicas of `tensor`, in order.
  std::vector<int> ReplicasOf(int tensor) const;
  bool Owns(int tensor) const { return tensor >= 0 && tensor < num_tensors() &&
                                       PrimaryOf(tensor) == server_; }
  bool Holds(int tensor) const;  // primary or replica here

  // Replica side: applies the update that makes version `version`. A version already applied
  // is ignored (a resend); a gap is FAILED_PRECONDITION of kind kReplicaBehind
  // (runtime/error_kind.h). INVALID_ARGUMENT for a tensor not replicated here or a wrong size.
  absl::Status ApplyReplica(int tensor, int64_t version, const float* grad, int64_t size);
  // Replica side, catching up: replaces the tensor with the primary's at `version` when that
  // is newer than the replica's (else a no-op). INVALID_ARGUMENT for wrong sizes.
  absl::Status CatchUpReplica(int tensor, int64_t version, const std::string& weights,
                              const std::string& state);
  // Primary side: like Apply, and calls `ship(version, weights, state)` under the tensor's
  // lock after the local apply, so updates reach replicas in version order (and a replica
  // found behind can be sent the whole tensor); its error is returned.
  using ShipFn = std::function<absl::Status(int64_t version, const std::vector<float>& weights,
                                            const std::vector<float>& state)>;
  absl::Status ApplyAndShip(int tensor, const float* grad, int64_t size, const ShipFn& ship);
  // Copies a held tensor (primary or replica) with its state and version.
  absl::Status Snapshot(int tensor, std::vector<float>* weights, std::vector<float>* state,
                        int64_t* version) const;
  // Replaces a held tensor (a replacement server restoring it from another holder).
  absl::Status Restore(int tensor, const std::vector<float>& weights,
                       const std::vector<float>& state, int64_t version);
  // The online scrub's repair of a replica that differs from its primary: replaces it with the
  // primary's copy when the replica is still at `version` (FAILED_PRECONDITION, no change,
  // when it moved); INVALID_ARGUMENT for a tensor not replicated here or wrong sizes.
  absl::Status RepairReplica(int tensor, int64_t version, const std::string& weights,
                             const std::string& state);
  // Fault injection (InjectFault): flips bit `bit` of a held tensor's weight bytes.
  absl::Status FlipBit(int tensor, int64_t bit);
  // Checksum over a held tensor's weights and state, with its version.
  absl::Status Checksum(int tensor, uint64_t* checksum, int64_t* version) const;

  // Copies tensor `tensor` into *out and returns its version. INVALID_ARGUMENT when the
  // tensor is out of range or not owned here.
  absl::Status Read(int tensor, std::vector<float>* out, int64_t* version) const;
  // Applies a gradient of exactly the tensor's size. INVALID_ARGUMENT (nothing changes) on a
  // wrong tensor or size.
  absl::Status Apply(int tensor, const float* grad, int64_t size);
  // Validates a tensor id and gradient size without applying anything.
  absl::Status Check(int tensor, int64_t size) const;

  int64_t owned_tensors() const;
  int64_t bytes() const;

 private:
  // Copies a snapshot (weights, state at `version`) over replica `tensor` when `admit(held
  // version, version)` is OK; CANCELLED from it: leave the replica as it is, and return OK.
  // `what` names the snapshot in errors.
  absl::Status OverwriteReplica(int tensor, int64_t version, const std::string& weights,
                                const std::string& state, const char* what,
                                absl::FunctionRef<absl::Status(int64_t held, int64_t given)> admit);

  struct Tensor {
    mutable absl::Mutex mu;
    std::vector<float> weights ABSL_GUARDED_BY(mu);
    std::vector<float> state ABSL_GUARDED_BY(mu);
    int64_t version ABSL_GUARDED_BY(mu) = 0;
  };
  const DenseOptimizerConfig optimizer_;
  const int servers_;
  const int server_;
  const int replicas_;
  std::vector<int64_t> sizes_;
  // One per tensor (num_tensors()); empty weights for tensors not held here.
  std::unique_ptr<Tensor[]> tensors_;
};

}  // namespace ecps

#endif  // ECPS_PS_DENSE_STORE_H_

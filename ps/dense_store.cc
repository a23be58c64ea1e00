#include "ps/dense_store.h"

#include <cstring>
#include <string>

#include "kernels/optimizers.h"
#include "runtime/error_kind.h"

namespace ecps {

DenseStore::DenseStore(const DenseOptimizerConfig& optimizer, int servers, int server,
                       std::vector<std::vector<float>> initial, int replicas)
    : optimizer_(optimizer),
      servers_(servers),
      server_(server),
      replicas_(std::min(replicas, servers - 1)) {
  tensors_ = std::make_unique<Tensor[]>(initial.size());
  for (size_t i = 0; i < initial.size(); ++i) {
    sizes_.push_back(static_cast<int64_t>(initial[i].size()));
    if (!Holds(static_cast<int>(i))) continue;
    Tensor& t = tensors_[i];
    absl::MutexLock lock(&t.mu);
    t.state.assign(DenseStateFloats(optimizer_, sizes_[i]), 0.0f);
    t.weights = std::move(initial[i]);
  }
}

std::vector<int> DenseStore::ReplicasOf(int tensor) const {
  std::vector<int> out;
  for (int d = 1; d <= replicas_; ++d) out.push_back((tensor + d) % servers_);
  return out;
}

bool DenseStore::Holds(int tensor) const {
  if (tensor < 0 || tensor >= num_tensors()) return false;
  if (PrimaryOf(tensor) == server_) return true;
  for (int r : ReplicasOf(tensor)) {
    if (r == server_) return true;
  }
  return false;
}

absl::Status DenseStore::ApplyReplica(int tensor, int64_t version, const float* grad,
                                      int64_t size) {
  if (!Holds(tensor) || Owns(tensor)) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " is not replicated on server " + std::to_string(server_));
  }
  if (size != sizes_[tensor]) {
    return absl::InvalidArgumentError("dense replica update of tensor " + std::to_string(tensor) +
                                      " has a wrong size");
  }
  Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  if (version <= t.version) return absl::OkStatus();  // a resend of an applied update
  if (version != t.version + 1) {
    return WithErrorKind(
        absl::FailedPreconditionError("dense replica of tensor " + std::to_string(tensor) +
                                      " is at version " + std::to_string(t.version) +
                                      ", got update " + std::to_string(version)),
        ErrorKind::kReplicaBehind);
  }
  t.version = version;
  ApplyDenseUpdate(optimizer_, t.version, size, grad, t.weights.data(), t.state.data());
  return absl::OkStatus();
}

absl::Status DenseStore::ApplyAndShip(int tensor, const float* grad, int64_t size,
                                      const ShipFn& ship) {
  if (absl::Status s = Check(tensor, size); !s.ok()) return s;
  Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  ++t.version;
  ApplyDenseUpdate(optimizer_, t.version, size, grad, t.weights.data(), t.state.data());
  return ship(t.version, t.weights, t.state);
}

absl::Status DenseStore::CatchUpReplica(int tensor, int64_t version, const std::string& weights,
                                        const std::string& state) {
  // An older snapshot than what the replica holds changes nothing.
  return OverwriteReplica(tensor, version, weights, state, "dense replica snapshot",
                          [](int64_t held, int64_t given) -> absl::Status {
                            return given <= held ? absl::CancelledError() : absl::OkStatus();
                          });
}

absl::Status DenseStore::Snapshot(int tensor, std::vector<float>* weights,
                                  std::vector<float>* state, int64_t* version) const {
  if (!Holds(tensor)) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " is not held here");
  }
  const Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  *weights = t.weights;
  *state = t.state;
  *version = t.version;
  return absl::OkStatus();
}

absl::Status DenseStore::RepairReplica(int tensor, int64_t version, const std::string& weights,
                                       const std::string& state) {
  return OverwriteReplica(
      tensor, version, weights, state, "dense repair",
      [tensor](int64_t held, int64_t given) -> absl::Status {
        if (given == held) return absl::OkStatus();
        return absl::FailedPreconditionError("dense replica of tensor " + std::to_string(tensor) +
                                             " is at version " + std::to_string(held) + ", not " +
                                             std::to_string(given));
      });
}

absl::Status DenseStore::OverwriteReplica(
    int tensor, int64_t version, const std::string& weights, const std::string& state,
    const char* what, absl::FunctionRef<absl::Status(int64_t held, int64_t given)> admit) {
  if (!Holds(tensor) || Owns(tensor)) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " is not replicated on server " + std::to_string(server_));
  }
  Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  if (weights.size() != t.weights.size() * sizeof(float) ||
      state.size() != t.state.size() * sizeof(float)) {
    return absl::InvalidArgumentError(std::string(what) + " of tensor " + std::to_string(tensor) +
                                      " has wrong sizes");
  }
  if (absl::Status s = admit(t.version, version); !s.ok()) {
    return absl::IsCancelled(s) ? absl::OkStatus() : s;
  }
  std::memcpy(t.weights.data(), weights.data(), weights.size());
  std::memcpy(t.state.data(), state.data(), state.size());
  t.version = version;
  return absl::OkStatus();
}

absl::Status DenseStore::FlipBit(int tensor, int64_t bit) {
  if (!Holds(tensor)) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " is not held here");
  }
  Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  if (bit < 0 || bit >= int64_t{8} * static_cast<int64_t>(t.weights.size() * sizeof(float))) {
    return absl::InvalidArgumentError("bit " + std::to_string(bit) + " is past dense tensor " +
                                      std::to_string(tensor) + "'s weights");
  }
  reinterpret_cast<uint8_t*>(t.weights.data())[bit / 8] ^= uint8_t(1u << (bit % 8));
  return absl::OkStatus();
}

absl::Status DenseStore::Restore(int tensor, const std::vector<float>& weights,
                                 const std::vector<float>& state, int64_t version) {
  if (!Holds(tensor)) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " is not held here");
  }
  Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  if (weights.size() != t.weights.size() || state.size() != t.state.size()) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " restored with wrong sizes");
  }
  t.weights = weights;
  t.state = state;
  t.version = version;
  return absl::OkStatus();
}

absl::Status DenseStore::Checksum(int tensor, uint64_t* checksum, int64_t* version) const {
  if (!Holds(tensor)) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " is not held here");
  }
  const Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::vector<float>& v) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(t.weights);
  mix(t.state);
  *checksum = h;
  *version = t.version;
  return absl::OkStatus();
}

absl::Status DenseStore::Check(int tensor, int64_t size) const {
  if (tensor < 0 || tensor >= num_tensors()) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " out of range [0, " + std::to_string(num_tensors()) +
                                      ")");
  }
  if (!Owns(tensor)) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) +
                                      " is not held by server " + std::to_string(server_));
  }
  if (size >= 0 && size != sizes_[tensor]) {
    return absl::InvalidArgumentError("dense tensor " + std::to_string(tensor) + " has " +
                                      std::to_string(sizes_[tensor]) + " floats, got " +
                                      std::to_string(size));
  }
  return absl::OkStatus();
}

absl::Status DenseStore::Read(int tensor, std::vector<float>* out, int64_t* version) const {
  if (absl::Status s = Check(tensor, -1); !s.ok()) return s;
  const Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  *out = t.weights;
  *version = t.version;
  return absl::OkStatus();
}

absl::Status DenseStore::Apply(int tensor, const float* grad, int64_t size) {
  if (absl::Status s = Check(tensor, size); !s.ok()) return s;
  Tensor& t = tensors_[tensor];
  absl::MutexLock lock(&t.mu);
  ++t.version;
  ApplyDenseUpdate(optimizer_, t.version, size, grad, t.weights.data(), t.state.data());
  return absl::OkStatus();
}

int64_t DenseStore::owned_tensors() const {
  // Primaries only: replicas are counted in bytes().
  int64_t n = 0;
  for (int i = 0; i < num_tensors(); ++i) n += Owns(i) ? 1 : 0;
  return n;
}

int64_t DenseStore::bytes() const {
  int64_t total = 0;
  // From the sizes, which never change (Restore and CatchUpReplica check them): a tensor's
  // lock may be held for long while its primary ships an update to a replica that is down,
  // and the heartbeat's stats must not wait for that.
  for (int i = 0; i < num_tensors(); ++i) {
    if (!Holds(i)) continue;
    total += (sizes_[i] + DenseStateFloats(optimizer_, sizes_[i])) *
             static_cast<int64_t>(sizeof(float));
  }
  return total;
}

}  // namespace ecps

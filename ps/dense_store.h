// Dense parameters (the MLPs) a server is primary of, with their optimizer state.
//
// Dense tensor i is owned by server i mod S (DESIGN §3; replicas come with fault tolerance).
// Each tensor has its own lock; an update applies the dense optimizer to the whole tensor and
// bumps its version (the 1-based step used for Adam's bias correction). Thread-safe.
#ifndef ECPS_PS_DENSE_STORE_H_
#define ECPS_PS_DENSE_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "runtime/spec.h"

namespace ecps {

class DenseStore {
 public:
  // `initial` holds every tensor of the model (all servers compute the same deterministic
  // initial values); the store keeps those with index % servers == server.
  DenseStore(const DenseOptimizer& optimizer, int servers, int server,
             std::vector<std::vector<float>> initial);

  int num_tensors() const { return static_cast<int>(sizes_.size()); }
  bool Owns(int tensor) const { return tensor >= 0 && tensor < num_tensors() &&
                                       tensor % servers_ == server_; }

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
  struct Tensor {
    std::vector<float> weights;
    std::vector<float> state;
    int64_t version = 0;
    std::unique_ptr<std::mutex> mu = std::make_unique<std::mutex>();
  };
  const DenseOptimizer optimizer_;
  const int servers_;
  const int server_;
  std::vector<int64_t> sizes_;
  std::vector<Tensor> tensors_;  // empty weights for tensors owned elsewhere
};

}  // namespace ecps

#endif  // ECPS_PS_DENSE_STORE_H_

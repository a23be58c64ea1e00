// The DLRM model's dense part on the CPU (Naumov et al. 2019):
//
//   bottom MLP over the dense features, ReLU after every layer (its last width must equal
//   embedding_dim) -> z_0;
//   pooled embeddings z_1..z_T (one per sparse feature, pooled by the caller, see step.h);
//   interaction: the dot products <z_i, z_j> for i = 1..T, j < i (strictly lower triangle,
//   T(T+1)/2 values) concatenated after z_0;
//   top MLP: ReLU on hidden layers, a linear output of width 1 (the logit);
//   sigmoid + binary cross-entropy, averaged over the batch.
//
// Parameters live outside the model (on parameter servers, or in LocalTrainer); the model
// only describes them (tensors()) and computes with them.
#ifndef ECPS_KERNELS_DLRM_H_
#define ECPS_KERNELS_DLRM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ecps {

// The model's shape. A job's comes from its spec's model section (kernels/spec_config.h).
struct DlrmConfig {
  int num_dense = 0;   // dense features per sample
  int num_sparse = 0;  // sparse features (embedding tables) per sample
  int embedding_dim = 0;
  std::vector<int> bottom_mlp;  // widths; the last must equal embedding_dim
  std::vector<int> top_mlp;     // hidden widths; the output layer (1) is implied
};

struct DenseTensorInfo {
  std::string name;  // "bottom.0.weight", "bottom.0.bias", ..., "top.2.bias"
  int64_t size;      // weights are out x in, row-major; biases are out
};

class Dlrm {
 public:
  // INVALID_ARGUMENT when a size is not positive, bottom_mlp is empty or its last width is
  // not embedding_dim, or max_batch < 1.
  static absl::StatusOr<std::unique_ptr<Dlrm>> Create(const DlrmConfig& model, int max_batch);

  // W then b of every layer, bottom layers first, then top layers (the last is the output).
  const std::vector<DenseTensorInfo>& tensors() const { return tensors_; }
  int num_dense() const { return num_dense_; }
  int num_sparse() const { return num_sparse_; }
  int dim() const { return dim_; }
  // Multiply-adds of one sample's forward pass (for FLOP accounting in benchmarks).
  int64_t ForwardMacsPerSample() const;

  // Deterministic initial values: W ~ U(-sqrt(6/(in+out)), +) (Xavier-uniform), b = 0,
  // from a counter-based hash of (seed, tensor index, element). Resizes *tensors.
  void InitDense(uint64_t seed, std::vector<std::vector<float>>* tensors) const;

  // Forward + backward for `batch` samples. dense_x: batch*num_dense; pooled:
  // batch*num_sparse*dim (sample-major, then feature); labels: batch (0 or 1). params: one
  // pointer per tensor. Writes d_pooled (batch*num_sparse*dim) and grads (one per tensor, same
  // sizes) as gradients of the MEAN loss over the batch. Returns that mean BCE loss. probs
  // (batch) may be null. A batch larger than max_batch grows the scratch buffers (one
  // allocation); otherwise nothing is allocated.
  float ForwardBackward(int batch, const float* dense_x, const float* pooled, const float* labels,
                        const std::vector<const float*>& params, float* d_pooled,
                        const std::vector<float*>& grads, float* probs = nullptr);

  // Forward only: probs (batch) = sigmoid(logit).
  void Forward(int batch, const float* dense_x, const float* pooled,
               const std::vector<const float*>& params, float* probs);

  // Not copyable: owns scratch buffers. Not thread-safe per instance.
  Dlrm(const Dlrm&) = delete;
  Dlrm& operator=(const Dlrm&) = delete;

 private:
  struct Layer {
    int in, out;
    bool relu;
    int w;  // index of the weight tensor; the bias is w + 1
  };

  Dlrm() = default;
  void EnsureCapacity(int batch);
  // Runs the forward pass, leaving every activation in scratch; returns the logits buffer.
  const float* RunForward(int batch, const float* dense_x, const float* pooled,
                          const std::vector<const float*>& params);

  int num_dense_ = 0, num_sparse_ = 0, dim_ = 0, vectors_ = 0, pairs_ = 0, top_in_ = 0;
  int capacity_ = 0, max_width_ = 0;
  std::vector<Layer> bottom_, top_;
  std::vector<DenseTensorInfo> tensors_;
  // Scratch: activations of every layer, interaction input z, top input, two gradient
  // buffers, dz, logits and their gradient.
  std::vector<std::vector<float>> bottom_act_, top_act_;
  std::vector<float> z_, top_in_buf_, grad_a_, grad_b_, dz_, d_logits_;
};

}  // namespace ecps

#endif  // ECPS_KERNELS_DLRM_H_

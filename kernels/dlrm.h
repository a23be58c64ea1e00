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
#include "kernels/abft.h"
#include "kernels/abft_layer.h"
#include "kernels/dense_math.h"
#include "kernels/parallel.h"

namespace ecps {

struct DenseTensorInfo {
  std::string name;  // "bottom.0.weight", "bottom.0.bias", ..., "top.2.bias"
  int64_t size;      // weights are out x in, row-major; biases are out
};

class Dlrm {
 public:
  // INVALID_ARGUMENT when a size is not positive, bottom_mlp is empty or its last width is
  // not embedding_dim, or max_batch < 1. `threads` > 1: ForwardBackward and Forward split
  // the batch into that many slices computed at once (each with its own scratch, the dense
  // gradients summed in slice order), so results are deterministic for a given thread count;
  // call SetBlasThreads(1) then, or the BLAS threads compete with these.
  static absl::StatusOr<std::unique_ptr<Dlrm>> Create(const DlrmConfig& model, int max_batch,
                                                      int threads = 1);

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

  // Algorithm-based fault tolerance on every MLP layer's three GEMMs (kernels/abft.h): kOff
  // checks nothing; kDetect checks every GEMM with kGlobal; kAuto picks each GEMM's scheme by
  // SelectScheme from its shape (at the slice size of Create's max_batch) and `balance`.
  // `injector` (tests' fault seam) may be null and must outlive the model's use of it.
  void SetAbft(AbftMode mode, const MachineBalance& balance,
               GemmFaultInjector* injector = nullptr);
  // Checksum misses in the last ForwardBackward or Forward: 0 when every checked GEMM passed.
  int abft_misses() const;
  // Checksum misses in the last pass that ConfirmMiss cleared: rounding, not a fault
  // (kernels/abft.h). They do not count as misses.
  int abft_cleared() const;
  // Each layer's schemes, "bottom.0 forward=panel weight_grad=global input_grad=-; ...".
  std::string AbftPlan() const;

  // The model's threads, for the rest of a step (pooling, gradient aggregation, optimizers).
  ParallelRunner* runner() { return &runner_; }

  // Not copyable: owns scratch buffers. Not thread-safe per instance.
  Dlrm(const Dlrm&) = delete;
  Dlrm& operator=(const Dlrm&) = delete;

 private:
  struct Layer {
    int in, out;
    bool relu;
    int w;  // index of the weight tensor; the bias is w + 1
    LinearAbft abft;  // its GEMMs' schemes and fault sites; misses point at a workspace's
  };

  // The scratch of one slice of a batch: activations of every layer, top input, two gradient
  // buffers, logits' gradient, the interaction's scratch; for slices after the first, the
  // dense gradients of the slice (summed into the caller's afterwards).
  struct Workspace {
    int capacity = 0;
    std::vector<std::vector<float>> bottom_act, top_act;
    std::vector<float> top_in, grad_a, grad_b, d_logits, interaction;
    std::vector<std::vector<float>> grads;
    int abft_misses = 0;   // of the last pass over this slice
    int abft_cleared = 0;  // likewise
    std::vector<LayerChecksums> abft_sums;  // per layer: its forward's sums for its backward
  };

  explicit Dlrm(int threads) : runner_(threads) {}
  void EnsureCapacity(Workspace* ws, int batch) const;
  // Runs the forward pass of `batch` samples, leaving every activation in *ws; returns the
  // logits buffer.
  const float* RunForward(Workspace* ws, int batch, const float* dense_x, const float* pooled,
                          const std::vector<const float*>& params) const;
  // Forward and backward of one slice; d_logits scaled by 1/`mean_over`. Returns the
  // slice's summed loss.
  double SliceForwardBackward(Workspace* ws, int batch, int mean_over, const float* dense_x,
                              const float* pooled, const float* labels,
                              const std::vector<const float*>& params, float* d_pooled,
                              const std::vector<float*>& grads, float* probs) const;
  // How many slices a batch of `batch` samples is cut into.
  int Slices(int batch) const;
  // The checks of layer `l` of `mlp` (bottom_ or top_), misses counted in *ws.
  static LinearAbft ChecksOf(const std::vector<Layer>& mlp, size_t l, Workspace* ws);

  int num_dense_ = 0, num_sparse_ = 0, dim_ = 0, vectors_ = 0, pairs_ = 0, top_in_ = 0;
  int max_width_ = 0, max_batch_ = 1;
  std::vector<Layer> bottom_, top_;
  std::vector<DenseTensorInfo> tensors_;
  std::vector<Workspace> workspaces_;  // one per thread
  ParallelRunner runner_;
};

}  // namespace ecps

#endif  // ECPS_KERNELS_DLRM_H_

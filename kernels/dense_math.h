// The worker's dense math behind one interface: one training step (pooling, the DLRM's
// forward and backward, the loss, the per-row gradients) from host inputs to host
// gradients. Two implementations: the CPU one (kernels/cpu_dense_math.h: OpenBLAS and the
// vectorised kernels, on cluster.worker_threads threads) and the CUDA one
// (kernels/cuda/cuda_dense_math.h, loaded from the plugin libecps_gpu.so: cuBLASLt, CUDA
// kernels, NCCL across a worker's GPUs). Plain C++17, no absl and no CUDA header: the plugin
// and the GPU-only build on a device machine include it too.
#ifndef ECPS_KERNELS_DENSE_MATH_H_
#define ECPS_KERNELS_DENSE_MATH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ecps {

class GemmFaultInjector;  // kernels/abft.h

// How many more times a DenseMath computes a step whose ABFT checks missed (worker.abft)
// before it gives up with an error (docs/abft.md).
inline constexpr int kAbftRetries = 2;

// The model's shape. A job's comes from its spec's model section (domain/spec_config.h).
struct DlrmConfig {
  int num_dense = 0;   // dense features per sample
  int num_sparse = 0;  // sparse features (embedding tables) per sample
  int embedding_dim = 0;
  std::vector<int> bottom_mlp;  // widths; the last must equal embedding_dim
  std::vector<int> top_mlp;     // hidden widths; the output layer (1) is implied
};

// The sizes of the model's tensors: W then b of every layer, bottom layers first, then top
// layers (the last is the output); W is out x in, row-major. (Dlrm::tensors() has the names.)
inline std::vector<int64_t> DenseTensorSizes(const DlrmConfig& model) {
  std::vector<int64_t> sizes;
  auto layer = [&sizes](int in, int out) {
    sizes.push_back(static_cast<int64_t>(in) * out);
    sizes.push_back(out);
  };
  int in = model.num_dense;
  for (int w : model.bottom_mlp) layer(in, w), in = w;
  const int vectors = model.num_sparse + 1;
  in = model.embedding_dim + vectors * (vectors - 1) / 2;
  for (int w : model.top_mlp) layer(in, w), in = w;
  layer(in, 1);
  return sizes;
}

// One step's inputs, all host memory. rows[t] holds row_count[t] unique rows of table t
// (embedding_dim floats each); index[b * num_sparse + t] is the row sample b uses in table t.
struct StepInput {
  int batch = 0;
  const float* dense_x = nullptr;  // batch x num_dense
  const float* labels = nullptr;   // batch (0 or 1); not read by Predict
  const int32_t* index = nullptr;  // batch x num_sparse
  std::vector<const float*> rows;
  std::vector<int64_t> row_count;
  std::vector<const float*> params;  // one per tensor
};

// Where a step's results go (host memory): the gradients of the MEAN loss over the batch.
struct StepOutput {
  std::vector<float*> dense_grads;  // one per tensor
  std::vector<float*> row_grads;    // one per table: row_count[t] x embedding_dim
  float* probs = nullptr;           // batch, optional
  double loss = 0.0;                // the mean loss
};

class DenseMath {
 public:
  virtual ~DenseMath() = default;
  // "cpu" or "cuda".
  virtual const char* device() const = 0;
  // Copies a step's inputs to where the math runs (for the GPU: into pinned memory, then
  // asynchronously to every GPU); Train then computes on them. At most two steps are staged
  // at once: staging the next one before training the last overlaps the copy with the
  // compute. Empty string on success, otherwise what failed (as every call here).
  virtual std::string Stage(const StepInput& in) = 0;
  // Computes the oldest staged step into *out. `in` must be the StepInput it was staged from
  // (the CPU reads its pointers now; the GPU only checks the batch size).
  virtual std::string Train(const StepInput& in, StepOutput* out) = 0;
  // Stage + Train.
  std::string TrainStep(const StepInput& in, StepOutput* out) {
    std::string e = Stage(in);
    return e.empty() ? Train(in, out) : e;
  }
  // Forward only: probs (batch) = sigmoid(logit).
  virtual std::string Predict(const StepInput& in, float* probs) = 0;
  // ABFT (worker.abft) for a DenseMath that checks its own GEMMs: the CUDA one and the CPU run
  // of its bodies (the CPU DenseMath's checks are its Dlrm's: Dlrm::SetAbft). When `on`, every
  // MLP GEMM of a training step (each layer's forward, weight and input gradient) is checked
  // by its column checksums over all its rows (kernels/abft.h's kGlobal: worker.abft detect
  // and auto alike), and a step whose checks miss is computed again, up to kAbftRetries more
  // times; a step that never passes is an error. Predict is not checked. `injector` is the
  // tests' fault seam (null in production; only GemmFault::kOutput faults; it must outlive
  // this object's use of it). Empty string, or why ABFT cannot be set here.
  virtual std::string SetAbft(bool on, GemmFaultInjector* injector) {
    (void)injector;
    return on ? std::string(device()) + " dense math has no ABFT of its own" : "";
  }
  // Steps computed again because a checked GEMM failed its checksum (worker.abft), over this
  // object's life; 0 where nothing is checked.
  virtual int64_t abft_detections() const { return 0; }
  // Checksum misses that the confirmation cleared (kernels/abft.h ConfirmMiss: the same bits
  // again, within the deterministic rounding bound), over this object's life: columns, not
  // steps; they were not detections. 0 where nothing confirms.
  virtual int64_t abft_cleared() const { return 0; }
};

}  // namespace ecps

#endif  // ECPS_KERNELS_DENSE_MATH_H_

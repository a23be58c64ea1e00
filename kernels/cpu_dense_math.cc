#include "kernels/cpu_dense_math.h"

#include "kernels/pooling.h"

namespace ecps {
namespace {

std::string Check(const Dlrm& m, const StepInput& in) {
  if (in.batch < 1 || in.dense_x == nullptr || in.index == nullptr) return "empty step";
  if (static_cast<int>(in.rows.size()) != m.num_sparse() ||
      static_cast<int>(in.row_count.size()) != m.num_sparse()) {
    return "expected rows of " + std::to_string(m.num_sparse()) + " tables";
  }
  if (in.params.size() != m.tensors().size()) {
    return "expected " + std::to_string(m.tensors().size()) + " dense tensors";
  }
  return "";
}

}  // namespace

std::string CpuDenseMath::Stage(const StepInput& in) {
  if (std::string e = Check(*model_, in); !e.empty()) return e;
  if (staged_ >= 2) return "two steps are staged already: Train one first";
  ++staged_;
  return "";
}

std::string CpuDenseMath::Train(const StepInput& in, StepOutput* out) {
  if (staged_ == 0) return "no step is staged";
  --staged_;
  const int ns = model_->num_sparse(), dim = model_->dim();
  pooled_.resize(static_cast<size_t>(in.batch) * ns * dim);
  d_pooled_.resize(pooled_.size());
  PoolEmbeddings(in.index, in.rows, in.batch, ns, dim, pooled_.data(), model_->runner());
  // Every output of a pass is overwritten by the next, so a recomputed step leaves nothing of
  // the one that failed its checks.
  for (int attempt = 0;; ++attempt) {
    out->loss = model_->ForwardBackward(in.batch, in.dense_x, pooled_.data(), in.labels,
                                        in.params, d_pooled_.data(), out->dense_grads,
                                        out->probs);
    const int misses = model_->abft_misses();
    abft_cleared_ += model_->abft_cleared();
    if (misses == 0) break;
    ++abft_detections_;
    if (attempt == kAbftRetries) {
      return "ABFT: the dense step failed its GEMM checksums " +
             std::to_string(kAbftRetries + 1) + " times in a row (" + std::to_string(misses) +
             " columns the last time): this machine computes wrongly";
    }
  }
  AggregateRowGrads(in.index, in.row_count, d_pooled_.data(), in.batch, ns, dim, out->row_grads,
                    model_->runner());
  return "";
}

std::string CpuDenseMath::Predict(const StepInput& in, float* probs) {
  if (std::string e = Check(*model_, in); !e.empty()) return e;
  const int ns = model_->num_sparse(), dim = model_->dim();
  pooled_.resize(static_cast<size_t>(in.batch) * ns * dim);
  PoolEmbeddings(in.index, in.rows, in.batch, ns, dim, pooled_.data(), model_->runner());
  model_->Forward(in.batch, in.dense_x, pooled_.data(), in.params, probs);
  return "";
}

}  // namespace ecps

#include "kernels/dlrm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/dense_ops.h"
#include "kernels/hash_rng.h"

namespace ecps {

absl::StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const DlrmConfig& model, int max_batch) {
  if (model.num_dense < 1) return absl::InvalidArgumentError("model.num_dense must be >= 1");
  if (model.num_sparse < 1) return absl::InvalidArgumentError("model.num_sparse must be >= 1");
  if (model.embedding_dim < 1) {
    return absl::InvalidArgumentError("model.embedding_dim must be >= 1");
  }
  if (model.bottom_mlp.empty() || model.bottom_mlp.back() != model.embedding_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.bottom_mlp: the last width must equal model.embedding_dim (",
                     model.embedding_dim, ")"));
  }
  for (int w : model.bottom_mlp) {
    if (w < 1) return absl::InvalidArgumentError("model.bottom_mlp: widths must be >= 1");
  }
  for (int w : model.top_mlp) {
    if (w < 1) return absl::InvalidArgumentError("model.top_mlp: widths must be >= 1");
  }
  if (max_batch < 1) return absl::InvalidArgumentError("max_batch must be >= 1");

  std::unique_ptr<Dlrm> m(new Dlrm());
  m->num_dense_ = model.num_dense;
  m->num_sparse_ = model.num_sparse;
  m->dim_ = model.embedding_dim;
  m->vectors_ = model.num_sparse + 1;
  m->pairs_ = InteractionPairs(m->vectors_);
  m->top_in_ = m->dim_ + m->pairs_;
  auto add = [&](std::vector<Layer>* layers, const char* prefix, int in, int out, bool relu) {
    const int idx = static_cast<int>(layers->size());
    layers->push_back({in, out, relu, static_cast<int>(m->tensors_.size())});
    m->tensors_.push_back(
        {absl::StrCat(prefix, ".", idx, ".weight"), static_cast<int64_t>(in) * out});
    m->tensors_.push_back({absl::StrCat(prefix, ".", idx, ".bias"), out});
    m->max_width_ = std::max({m->max_width_, in, out});
  };
  int in = model.num_dense;
  for (int w : model.bottom_mlp) {
    add(&m->bottom_, "bottom", in, w, true);
    in = w;
  }
  in = m->top_in_;
  for (int w : model.top_mlp) {
    add(&m->top_, "top", in, w, true);
    in = w;
  }
  add(&m->top_, "top", in, 1, false);
  m->max_width_ = std::max(m->max_width_, m->vectors_ * m->dim_);
  m->EnsureCapacity(max_batch);
  return m;
}

int64_t Dlrm::ForwardMacsPerSample() const {
  int64_t macs = static_cast<int64_t>(pairs_) * dim_;
  for (const auto& l : bottom_) macs += static_cast<int64_t>(l.in) * l.out;
  for (const auto& l : top_) macs += static_cast<int64_t>(l.in) * l.out;
  return macs;
}

void Dlrm::EnsureCapacity(int batch) {
  if (batch <= capacity_) return;
  capacity_ = batch;
  const size_t b = static_cast<size_t>(batch);
  bottom_act_.resize(bottom_.size());
  for (size_t l = 0; l < bottom_.size(); ++l) bottom_act_[l].resize(b * bottom_[l].out);
  top_act_.resize(top_.size());
  for (size_t l = 0; l < top_.size(); ++l) top_act_[l].resize(b * top_[l].out);
  z_.resize(b * vectors_ * dim_);
  top_in_buf_.resize(b * top_in_);
  grad_a_.resize(b * std::max(max_width_, top_in_));
  grad_b_.resize(b * std::max(max_width_, top_in_));
  dz_.resize(b * vectors_ * dim_);
  d_logits_.resize(b);
}

void Dlrm::InitDense(uint64_t seed, std::vector<std::vector<float>>* tensors) const {
  tensors->resize(tensors_.size());
  auto init = [&](const Layer& l) {
    std::vector<float>& w = (*tensors)[l.w];
    w.resize(static_cast<size_t>(l.in) * l.out);
    const float bound = std::sqrt(6.0f / static_cast<float>(l.in + l.out));
    const uint64_t base = HashOf(seed, 0xD1A5ull, static_cast<uint64_t>(l.w));
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = (2.0f * UnitFloat(Mix64(base + i)) - 1.0f) * bound;
    }
    (*tensors)[l.w + 1].assign(l.out, 0.0f);
  };
  for (const auto& l : bottom_) init(l);
  for (const auto& l : top_) init(l);
}

const float* Dlrm::RunForward(int batch, const float* dense_x, const float* pooled,
                              const std::vector<const float*>& params) {
  EnsureCapacity(batch);
  const float* x = dense_x;
  for (size_t l = 0; l < bottom_.size(); ++l) {
    const Layer& L = bottom_[l];
    LinearForward(batch, L.in, L.out, x, params[L.w], params[L.w + 1], L.relu,
                  bottom_act_[l].data());
    x = bottom_act_[l].data();
  }
  // z = [bottom_out, pooled_0..pooled_{T-1}] per sample; top input = [bottom_out, dots].
  const int d = dim_, T = num_sparse_;
  const size_t zs = static_cast<size_t>(vectors_) * d;
  for (int b = 0; b < batch; ++b) {
    float* zb = z_.data() + b * zs;
    std::memcpy(zb, x + static_cast<size_t>(b) * d, sizeof(float) * d);
    std::memcpy(zb + d, pooled + static_cast<size_t>(b) * T * d, sizeof(float) * T * d);
    std::memcpy(top_in_buf_.data() + static_cast<size_t>(b) * top_in_, zb, sizeof(float) * d);
  }
  InteractionForward(batch, vectors_, d, z_.data(), top_in_buf_.data() + d, top_in_);
  x = top_in_buf_.data();
  for (size_t l = 0; l < top_.size(); ++l) {
    const Layer& L = top_[l];
    LinearForward(batch, L.in, L.out, x, params[L.w], params[L.w + 1], L.relu, top_act_[l].data());
    x = top_act_[l].data();
  }
  return x;  // logits: batch x 1
}

void Dlrm::Forward(int batch, const float* dense_x, const float* pooled,
                   const std::vector<const float*>& params, float* probs) {
  if (batch <= 0) return;
  const float* logits = RunForward(batch, dense_x, pooled, params);
  for (int b = 0; b < batch; ++b) {
    const float z = logits[b];
    probs[b] = z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
  }
}

float Dlrm::ForwardBackward(int batch, const float* dense_x, const float* pooled,
                            const float* labels, const std::vector<const float*>& params,
                            float* d_pooled, const std::vector<float*>& grads, float* probs) {
  if (batch <= 0) return 0.0f;
  const float* logits = RunForward(batch, dense_x, pooled, params);
  const float loss = BceWithLogits(batch, logits, labels, d_logits_.data(), probs);

  // Top MLP, output layer first. dy holds dL/d(output of layer l) (after its ReLU mask).
  const float* dy = d_logits_.data();
  float* bufs[2] = {grad_a_.data(), grad_b_.data()};
  int next = 0;
  for (int l = static_cast<int>(top_.size()) - 1; l >= 0; --l) {
    const Layer& L = top_[l];
    const float* x = l > 0 ? top_act_[l - 1].data() : top_in_buf_.data();
    float* dx = bufs[next];
    LinearBackward(batch, L.in, L.out, x, params[L.w], dy, grads[L.w], grads[L.w + 1], dx);
    if (l > 0 && top_[l - 1].relu) {
      ReluBackwardInPlace(static_cast<int64_t>(batch) * L.in, x, dx);
    }
    dy = dx;
    next ^= 1;
  }
  // dy = d top_in (batch x top_in_). Interaction backward, then split dz.
  const int d = dim_, T = num_sparse_;
  const size_t zs = static_cast<size_t>(vectors_) * d;
  InteractionBackward(batch, vectors_, d, z_.data(), dy + d, top_in_, dz_.data());
  float* d_bottom = bufs[next];
  next ^= 1;
  for (int b = 0; b < batch; ++b) {
    const float* dzb = dz_.data() + b * zs;
    const float* direct = dy + static_cast<size_t>(b) * top_in_;
    float* db = d_bottom + static_cast<size_t>(b) * d;
    for (int k = 0; k < d; ++k) db[k] = dzb[k] + direct[k];
    std::memcpy(d_pooled + static_cast<size_t>(b) * T * d, dzb + d, sizeof(float) * T * d);
  }
  // Bottom MLP: every layer has a ReLU.
  dy = d_bottom;
  ReluBackwardInPlace(static_cast<int64_t>(batch) * d, bottom_act_.back().data(), d_bottom);
  for (int l = static_cast<int>(bottom_.size()) - 1; l >= 0; --l) {
    const Layer& L = bottom_[l];
    const float* x = l > 0 ? bottom_act_[l - 1].data() : dense_x;
    float* dx = l > 0 ? bufs[next] : nullptr;
    LinearBackward(batch, L.in, L.out, x, params[L.w], dy, grads[L.w], grads[L.w + 1], dx);
    if (l > 0) {
      ReluBackwardInPlace(static_cast<int64_t>(batch) * L.in, x, dx);
      dy = dx;
      next ^= 1;
    }
  }
  return loss;
}

}  // namespace ecps

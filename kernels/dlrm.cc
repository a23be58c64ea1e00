#include "kernels/dlrm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/dense_ops.h"
#include "kernels/hash_rng.h"

namespace ecps {

namespace {
// A slice smaller than this is not worth a thread's wake-up.
constexpr int kMinSliceSamples = 64;
}  // namespace

absl::StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const DlrmConfig& model, int max_batch,
                                                   int threads) {
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
  if (threads < 1) return absl::InvalidArgumentError("threads must be >= 1");

  std::unique_ptr<Dlrm> m(new Dlrm(threads));
  m->num_dense_ = model.num_dense;
  m->num_sparse_ = model.num_sparse;
  m->dim_ = model.embedding_dim;
  m->vectors_ = model.num_sparse + 1;
  m->pairs_ = InteractionPairs(m->vectors_);
  m->top_in_ = m->dim_ + m->pairs_;
  auto add = [&](std::vector<Layer>* layers, const char* prefix, int in, int out, bool relu) {
    const int idx = static_cast<int>(layers->size());
    layers->push_back({in, out, relu, static_cast<int>(m->tensors_.size()), LinearAbft{}});
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
  m->max_batch_ = max_batch;
  m->workspaces_.resize(threads);
  const int slices = m->Slices(max_batch);
  for (int i = 0; i < slices; ++i) {
    m->EnsureCapacity(&m->workspaces_[i], static_cast<int>(
        ParallelRunner::PartBegin(max_batch, slices, i + 1) -
        ParallelRunner::PartBegin(max_batch, slices, i)));
  }
  return m;
}

void Dlrm::SetAbft(AbftMode mode, const MachineBalance& balance,
                   GemmFaultInjector* injector) {
  // Every slice but possibly the last has this many samples.
  const int slices = Slices(max_batch_);
  const int batch = (max_batch_ + slices - 1) / slices;
  int site = 0;
  auto plan = [&](Layer* l) {
    auto pick = [&](int m, int n, int k) {
      if (mode == AbftMode::kOff) return AbftScheme::kNone;
      if (mode == AbftMode::kDetect) return AbftScheme::kGlobal;
      return SelectScheme(m, n, k, balance);
    };
    l->abft.forward = pick(batch, l->out, l->in);
    l->abft.weight_grad = pick(l->out, l->in, batch);
    l->abft.input_grad = pick(batch, l->in, l->out);
    l->abft.site = site;
    l->abft.injector = injector;
    site += 3;
  };
  for (Layer& l : bottom_) plan(&l);
  for (Layer& l : top_) plan(&l);
  // The first bottom layer's input gradient is never computed (the dense features are data).
  if (!bottom_.empty()) bottom_[0].abft.input_grad = AbftScheme::kNone;
}

int Dlrm::abft_misses() const {
  int misses = 0;
  for (const Workspace& ws : workspaces_) misses += ws.abft_misses;
  return misses;
}

int Dlrm::abft_cleared() const {
  int cleared = 0;
  for (const Workspace& ws : workspaces_) cleared += ws.abft_cleared;
  return cleared;
}

std::string Dlrm::AbftPlan() const {
  std::string out;
  auto describe = [&](const char* prefix, const std::vector<Layer>& layers) {
    for (size_t i = 0; i < layers.size(); ++i) {
      const LinearAbft& a = layers[i].abft;
      absl::StrAppend(&out, out.empty() ? "" : "; ", prefix, ".", i,
                      " forward=", AbftSchemeName(a.forward),
                      " weight_grad=", AbftSchemeName(a.weight_grad),
                      " input_grad=", AbftSchemeName(a.input_grad));
    }
  };
  describe("bottom", bottom_);
  describe("top", top_);
  return out;
}

LinearAbft Dlrm::ChecksOf(const std::vector<Layer>& mlp, size_t l, Workspace* ws) {
  LinearAbft checks = mlp[l].abft;
  checks.misses = &ws->abft_misses;
  checks.cleared = &ws->abft_cleared;
  checks.sums = &ws->abft_sums[static_cast<size_t>(checks.site / 3)];
  if (l + 1 < mlp.size()) {
    // The next layer reads this one's output: its sums can come from this epilogue.
    LinearAbft next = mlp[l + 1].abft;
    next.sums = &ws->abft_sums[static_cast<size_t>(next.site / 3)];
    if (UsesLayerChecksums(checks) && UsesLayerChecksums(next)) checks.output_sums = next.sums;
  }
  return checks;
}

int Dlrm::Slices(int batch) const {
  return std::max(1, std::min(runner_.threads(), batch / kMinSliceSamples));
}

int64_t Dlrm::ForwardMacsPerSample() const {
  int64_t macs = static_cast<int64_t>(pairs_) * dim_;
  for (const auto& l : bottom_) macs += static_cast<int64_t>(l.in) * l.out;
  for (const auto& l : top_) macs += static_cast<int64_t>(l.in) * l.out;
  return macs;
}

void Dlrm::EnsureCapacity(Workspace* ws, int batch) const {
  ws->abft_sums.resize(bottom_.size() + top_.size());  // one per layer, by its first site / 3
  if (batch <= ws->capacity) return;
  ws->capacity = batch;
  const size_t b = static_cast<size_t>(batch);
  ws->bottom_act.resize(bottom_.size());
  for (size_t l = 0; l < bottom_.size(); ++l) ws->bottom_act[l].resize(b * bottom_[l].out);
  ws->top_act.resize(top_.size());
  for (size_t l = 0; l < top_.size(); ++l) ws->top_act[l].resize(b * top_[l].out);
  ws->top_in.resize(b * top_in_);
  ws->grad_a.resize(b * max_width_);  // every layer's input and output, top_in_ and dim_ among them
  ws->grad_b.resize(b * max_width_);
  ws->d_logits.resize(b);
  ws->interaction.resize(InteractionScratchFloats(vectors_, dim_));
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

const float* Dlrm::RunForward(Workspace* ws, int batch, const float* dense_x,
                              const float* pooled,
                              const std::vector<const float*>& params) const {
  EnsureCapacity(ws, batch);
  const float* x = dense_x;
  for (size_t l = 0; l < bottom_.size(); ++l) {
    const Layer& L = bottom_[l];
    const LinearAbft checks = ChecksOf(bottom_, l, ws);
    LinearForward(batch, L.in, L.out, x, params[L.w], params[L.w + 1], L.relu,
                  ws->bottom_act[l].data(), &checks);
    x = ws->bottom_act[l].data();
  }
  // The interaction's vectors are [bottom_out, pooled_0..pooled_{T-1}] per sample, read where
  // they are; top input = [bottom_out, dots].
  const int d = dim_;
  for (int b = 0; b < batch; ++b) {
    std::memcpy(ws->top_in.data() + static_cast<size_t>(b) * top_in_,
                x + static_cast<size_t>(b) * d, sizeof(float) * d);
  }
  InteractionForward(batch, vectors_, d, x, pooled, ws->top_in.data() + d, top_in_,
                     ws->interaction.data());
  x = ws->top_in.data();
  for (size_t l = 0; l < top_.size(); ++l) {
    const Layer& L = top_[l];
    const LinearAbft checks = ChecksOf(top_, l, ws);
    LinearForward(batch, L.in, L.out, x, params[L.w], params[L.w + 1], L.relu,
                  ws->top_act[l].data(), &checks);
    x = ws->top_act[l].data();
  }
  return x;  // logits: batch x 1
}

void Dlrm::Forward(int batch, const float* dense_x, const float* pooled,
                   const std::vector<const float*>& params, float* probs) {
  for (Workspace& ws : workspaces_) ws.abft_misses = ws.abft_cleared = 0;
  if (batch <= 0) return;
  const int slices = Slices(batch);
  runner_.Run(slices, [&](int i) {
    ScopedFlushDenormals flush;
    const int64_t b0 = ParallelRunner::PartBegin(batch, slices, i);
    const int n = static_cast<int>(ParallelRunner::PartBegin(batch, slices, i + 1) - b0);
    const float* logits =
        RunForward(&workspaces_[i], n, dense_x + b0 * num_dense_,
                   pooled + b0 * num_sparse_ * dim_, params);
    for (int b = 0; b < n; ++b) {
      const float z = logits[b];
      probs[b0 + b] = z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
    }
  });
}

float Dlrm::ForwardBackward(int batch, const float* dense_x, const float* pooled,
                            const float* labels, const std::vector<const float*>& params,
                            float* d_pooled, const std::vector<float*>& grads, float* probs) {
  for (Workspace& ws : workspaces_) ws.abft_misses = ws.abft_cleared = 0;
  if (batch <= 0) return 0.0f;
  ScopedFlushDenormals flush;  // on this thread; each slice below sets its own
  const int slices = Slices(batch);
  if (slices == 1) {
    return static_cast<float>(SliceForwardBackward(&workspaces_[0], batch, batch, dense_x,
                                                   pooled, labels, params, d_pooled, grads,
                                                   probs) /
                              batch);
  }
  // Slice 0 writes the caller's gradients; the others their own, summed in afterwards.
  std::vector<double> losses(slices, 0.0);
  runner_.Run(slices, [&](int i) {
    ScopedFlushDenormals flush;
    Workspace* ws = &workspaces_[i];
    std::vector<float*> slice_grads = grads;
    if (i > 0) {
      ws->grads.resize(tensors_.size());
      for (size_t t = 0; t < tensors_.size(); ++t) {
        ws->grads[t].resize(tensors_[t].size);
        slice_grads[t] = ws->grads[t].data();
      }
    }
    const int64_t b0 = ParallelRunner::PartBegin(batch, slices, i);
    const int n = static_cast<int>(ParallelRunner::PartBegin(batch, slices, i + 1) - b0);
    const int64_t pooled_offset = b0 * num_sparse_ * dim_;
    losses[i] = SliceForwardBackward(ws, n, batch, dense_x + b0 * num_dense_,
                                     pooled + pooled_offset, labels + b0, params,
                                     d_pooled + pooled_offset, slice_grads,
                                     probs == nullptr ? nullptr : probs + b0);
  });
  // Sum the slices' gradients, each tensor cut into one part per thread; every element adds
  // slices 1, 2, ... in order.
  runner_.Run(slices, [&](int part) {
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const int64_t size = tensors_[t].size;
      const int64_t e0 = ParallelRunner::PartBegin(size, slices, part);
      const int64_t e1 = ParallelRunner::PartBegin(size, slices, part + 1);
      float* out = grads[t];
      for (int i = 1; i < slices; ++i) {
        const float* g = workspaces_[i].grads[t].data();
        for (int64_t e = e0; e < e1; ++e) out[e] += g[e];
      }
    }
  });
  double total = 0.0;
  for (double l : losses) total += l;
  return static_cast<float>(total / batch);
}

double Dlrm::SliceForwardBackward(Workspace* ws, int batch, int mean_over, const float* dense_x,
                                  const float* pooled, const float* labels,
                                  const std::vector<const float*>& params, float* d_pooled,
                                  const std::vector<float*>& grads, float* probs) const {
  const float* logits = RunForward(ws, batch, dense_x, pooled, params);
  const double loss = BceWithLogitsSum(batch, logits, labels,
                                       1.0f / static_cast<float>(mean_over),
                                       ws->d_logits.data(), probs);

  // Top MLP, output layer first. dy holds dL/d(output of layer l) (after its ReLU mask).
  const float* dy = ws->d_logits.data();
  float* bufs[2] = {ws->grad_a.data(), ws->grad_b.data()};
  int next = 0;
  for (int l = static_cast<int>(top_.size()) - 1; l >= 0; --l) {
    const Layer& L = top_[l];
    const float* x = l > 0 ? ws->top_act[l - 1].data() : ws->top_in.data();
    float* dx = bufs[next];
    const LinearAbft checks = ChecksOf(top_, l, ws);
    // dx then goes through the previous layer's ReLU: LinearBackward masks it.
    const float* mask = l > 0 && top_[l - 1].relu ? x : nullptr;
    LinearBackward(batch, L.in, L.out, x, params[L.w], dy, grads[L.w], grads[L.w + 1], dx,
                   &checks, mask);
    dy = dx;
    next ^= 1;
  }
  // dy = d top_in (batch x top_in_). The interaction's backward writes d_pooled and, for the
  // bottom output, what reaches it through the dots; add what reaches it directly, then its
  // ReLU's mask (every bottom layer has one).
  const int d = dim_;
  const float* bottom_out = ws->bottom_act.back().data();
  float* d_bottom = bufs[next];
  next ^= 1;
  InteractionBackward(batch, vectors_, d, bottom_out, pooled, dy + d, top_in_, d_bottom, d_pooled,
                      ws->interaction.data());
  for (int b = 0; b < batch; ++b) {
    const float* direct = dy + static_cast<size_t>(b) * top_in_;
    const float* y = bottom_out + static_cast<size_t>(b) * d;
    float* db = d_bottom + static_cast<size_t>(b) * d;
    for (int k = 0; k < d; ++k) db[k] = y[k] > 0.0f ? db[k] + direct[k] : 0.0f;
  }
  dy = d_bottom;
  for (int l = static_cast<int>(bottom_.size()) - 1; l >= 0; --l) {
    const Layer& L = bottom_[l];
    const float* x = l > 0 ? ws->bottom_act[l - 1].data() : dense_x;
    float* dx = l > 0 ? bufs[next] : nullptr;
    const LinearAbft checks = ChecksOf(bottom_, l, ws);
    LinearBackward(batch, L.in, L.out, x, params[L.w], dy, grads[L.w], grads[L.w + 1], dx,
                   &checks, l > 0 ? x : nullptr);  // every bottom layer has a ReLU
    if (l > 0) {
      dy = dx;
      next ^= 1;
    }
  }
  return loss;
}

}  // namespace ecps

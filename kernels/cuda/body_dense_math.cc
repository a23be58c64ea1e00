#include "kernels/cuda/body_dense_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/abft.h"
#include "kernels/cuda/step_plan.h"
#include "kernels/cuda/train_kernels.h"

namespace ecps::gpu {
namespace {

// C = op(A) op(B), each element's products summed over i in order (cuBLAS's place on the GPU).
void Gemm(const GemmOperands& g) {
  for (int r = 0; r < g.m; ++r) {
    for (int j = 0; j < g.n; ++j) {
      float s = 0.0f;
      for (int i = 0; i < g.k; ++i) s += OpA(g, r, i) * OpB(g, i, j);
      g.c[static_cast<int64_t>(r) * g.ldc + j] = s;
    }
  }
}

class BodyDenseMath final : public DenseMath {
 public:
  BodyDenseMath(ModelPlan plan, int max_batch, int slices)
      : plan_(std::move(plan)), max_batch_(max_batch), slices_(slices) {}

  const char* device() const override { return "cpu-bodies"; }

  std::string Stage(const StepInput& in) override {
    return CheckInput(plan_, in, max_batch_, true);
  }

  std::string SetAbft(bool on, GemmFaultInjector* injector) override {
    abft_ = on;
    injector_ = on ? injector : nullptr;
    return "";
  }
  int64_t abft_detections() const override { return abft_detections_; }
  int64_t abft_cleared() const override { return abft_cleared_; }

  std::string Train(const StepInput& in, StepOutput* out) override {
    if (std::string e = CheckInput(plan_, in, max_batch_, true); !e.empty()) return e;
    std::vector<float> params = FlatParams(in);
    int64_t rows = 0;
    for (int64_t c : in.row_count) rows += c;
    const int64_t grad_floats = plan_.params + rows * plan_.dim;
    std::vector<float> total(grad_floats), slice(grad_floats);
    std::vector<float> losses(in.batch);
    // Every output of an attempt is overwritten by the next, so a recomputed step keeps
    // nothing of the one that missed its checks.
    for (int attempt = 0;; ++attempt) {
      BodyCheck checks;
      std::fill(total.begin(), total.end(), 0.0f);
      for (int part = 0; part < slices_; ++part) {
        const int b0 = SliceBegin(in.batch, slices_, part);
        const int b1 = SliceBegin(in.batch, slices_, part + 1);
        if (b1 == b0) continue;
        if (std::string e =
                Slice(in, params, b0, b1, slice.data(), losses.data() + b0,
                      out->probs == nullptr ? nullptr : out->probs + b0, abft_ ? &checks : nullptr);
            !e.empty()) {
          return e;
        }
        for (int64_t i = 0; i < grad_floats; ++i) total[i] += slice[i];
      }
      abft_cleared_ += checks.cleared;
      if (checks.misses == 0) break;
      ++abft_detections_;
      if (attempt == kAbftRetries) return AbftGiveUp(checks.misses);
    }
    double loss = 0.0;
    for (float l : losses) loss += l;
    out->loss = loss / in.batch;
    ScatterGrads(plan_, in, total.data(), out);
    return "";
  }

  std::string Predict(const StepInput& in, float* probs) override {
    if (std::string e = CheckInput(plan_, in, max_batch_, false); !e.empty()) return e;
    std::vector<float> params = FlatParams(in);
    RowUse use;
    if (std::string e = MakeRowUse(in, plan_.num_sparse, 0, in.batch, &use); !e.empty()) return e;
    Activations a;
    if (std::string e = Forward(in, params, use, 0, in.batch, nullptr, &a); !e.empty()) return e;
    ForEachIndex(in.batch, [&](int64_t b) { SigmoidAt(b, a.top.back().data(), probs); });
    return "";
  }

 private:
  struct Activations {
    std::vector<std::vector<float>> bottom, top;
    std::vector<float> z, top_in;
  };

  std::vector<float> FlatParams(const StepInput& in) const {
    std::vector<float> params(plan_.params, 0.0f);
    GatherParams(plan_, in, params.data());
    return params;
  }

  // Rows of all tables, table after table, in one buffer (what the GPU receives).
  static std::vector<float> FlatRows(const StepInput& in, int dim) {
    std::vector<float> rows;
    for (size_t t = 0; t < in.rows.size(); ++t) {
      rows.insert(rows.end(), in.rows[t], in.rows[t] + in.row_count[t] * dim);
    }
    return rows;
  }

  // GEMM g of `site`; with `checks` (ABFT on, training) the injector's flip of its output,
  // then its check, its counts added to *checks.
  std::string RunGemm(const GemmOperands& g, const LayerShape& l, LayerProduct product,
                      BodyCheck* checks) const {
    int64_t flip = -1;
    int bit = 0;
    if (checks != nullptr) {
      if (std::string e = AskInjector(injector_, AbftSite(l, product), g, &flip, &bit);
          !e.empty()) {
        return e;
      }
    }
    Gemm(g);
    if (flip >= 0) ForEachIndex(1, [&](int64_t i) { FlipBitAt(i, g.c, flip, bit); });
    if (checks != nullptr) {
      const BodyCheck c = CheckGemmOnCpu(g);
      checks->misses += c.misses;
      checks->cleared += c.cleared;
    }
    return "";
  }

  std::string Layer(const LayerShape& l, int n, const float* x, const std::vector<float>& params,
                    BodyCheck* checks, std::vector<float>* y) const {
    y->resize(static_cast<size_t>(n) * l.out);
    const GemmOperands g = ForwardGemm(n, l.in, l.out, x, params.data() + l.w, y->data());
    if (std::string e = RunGemm(g, l, LayerProduct::kForward, checks); !e.empty()) return e;
    ForEachIndex(static_cast<int64_t>(n) * l.out, [&](int64_t i) {
      BiasActivationAt(i, l.out, params.data() + l.b, l.relu, y->data());
    });
    return "";
  }

  // dw = dy^T x, db = the column sums of dy, dx = dy w when dx is not null.
  std::string LinearBackward(const LayerShape& l, int n, const float* x, const float* params,
                             const float* dy, float* grads, float* dx, BodyCheck* checks) const {
    if (std::string e = RunGemm(WeightGradGemm(n, l.in, l.out, dy, x, grads + l.w), l,
                                LayerProduct::kWeightGrad, checks);
        !e.empty()) {
      return e;
    }
    ForEachIndex(l.out, [&](int64_t o) { BiasGradAt(o, n, l.out, dy, grads + l.b); });
    if (dx == nullptr) return "";
    return RunGemm(InputGradGemm(n, l.in, l.out, dy, params + l.w, dx), l, LayerProduct::kInputGrad,
                   checks);
  }

  std::string Forward(const StepInput& in, const std::vector<float>& params, const RowUse& use,
                      int b0, int b1, BodyCheck* checks, Activations* a) const {
    const int n = b1 - b0;
    const float* x = in.dense_x + static_cast<int64_t>(b0) * plan_.num_dense;
    a->bottom.resize(plan_.bottom.size());
    for (size_t l = 0; l < plan_.bottom.size(); ++l) {
      if (std::string e = Layer(plan_.bottom[l], n, x, params, checks, &a->bottom[l]); !e.empty()) {
        return e;
      }
      x = a->bottom[l].data();
    }
    const std::vector<float> rows = FlatRows(in, plan_.dim);
    a->z.resize(static_cast<size_t>(n) * plan_.vectors * plan_.dim);
    a->top_in.resize(static_cast<size_t>(n) * plan_.top_in);
    const int32_t* index = in.index + static_cast<int64_t>(b0) * plan_.num_sparse;
    ForEachIndex(static_cast<int64_t>(a->z.size()), [&](int64_t i) {
      GatherInteractionInputAt(i, plan_.num_sparse, plan_.dim, x, rows.data(),
                               use.row_offset.data(), index, a->z.data(), a->top_in.data(),
                               plan_.top_in);
    });
    ForEachIndex(static_cast<int64_t>(n) * plan_.pairs, [&](int64_t i) {
      InteractionForwardAt(i, plan_.vectors, plan_.dim, a->z.data(), a->top_in.data() + plan_.dim,
                           plan_.top_in);
    });
    x = a->top_in.data();
    a->top.resize(plan_.top.size());
    for (size_t l = 0; l < plan_.top.size(); ++l) {
      if (std::string e = Layer(plan_.top[l], n, x, params, checks, &a->top[l]); !e.empty()) {
        return e;
      }
      x = a->top[l].data();
    }
    return "";
  }

  // The gradients of samples [b0, b1) (of the mean over the whole batch) into grads
  // (parameters, then rows), and their losses; with `checks`, every GEMM checked.
  std::string Slice(const StepInput& in, const std::vector<float>& params, int b0, int b1,
                    float* grads, float* losses, float* probs, BodyCheck* checks) const {
    RowUse use;
    if (std::string e = MakeRowUse(in, plan_.num_sparse, b0, b1, &use); !e.empty()) return e;
    const int n = b1 - b0;
    Activations a;
    if (std::string e = Forward(in, params, use, b0, b1, checks, &a); !e.empty()) return e;
    std::vector<float> d_logits(n);
    const float inv = 1.0f / static_cast<float>(in.batch);
    ForEachIndex(n, [&](int64_t b) {
      BceAt(b, a.top.back().data(), in.labels + b0, inv, losses, d_logits.data(), probs);
    });
    std::vector<float> dy = d_logits, dx;
    for (int l = static_cast<int>(plan_.top.size()) - 1; l >= 0; --l) {
      const LayerShape& L = plan_.top[l];
      const float* x = l > 0 ? a.top[l - 1].data() : a.top_in.data();
      dx.resize(static_cast<size_t>(n) * L.in);
      const bool output = l == static_cast<int>(plan_.top.size()) - 1;
      // The output layer's input gradient comes from the logits (the loss fused in), as on
      // the GPU.
      if (std::string e = LinearBackward(L, n, x, params.data(), dy.data(), grads,
                                         output ? nullptr : dx.data(), checks);
          !e.empty()) {
        return e;
      }
      if (output) {
        ForEachIndex(static_cast<int64_t>(n) * L.in, [&](int64_t i) {
          OutputLayerInputGradAt(i, L.in, a.top.back().data(), in.labels + b0, inv,
                                 params.data() + L.w, x, l > 0, dx.data());
        });
      } else if (l > 0) {
        ForEachIndex(static_cast<int64_t>(n) * L.in,
                     [&](int64_t i) { ReluBackwardAt(i, x, dx.data()); });
      }
      std::swap(dy, dx);
    }
    // dy = d top_in.
    std::vector<float> dz(a.z.size());
    ForEachIndex(static_cast<int64_t>(dz.size()), [&](int64_t i) {
      InteractionBackwardAt(i, plan_.vectors, plan_.dim, a.z.data(), dy.data() + plan_.dim,
                            plan_.top_in, dz.data());
    });
    std::vector<float> d_bottom(static_cast<size_t>(n) * plan_.dim);
    ForEachIndex(static_cast<int64_t>(d_bottom.size()), [&](int64_t i) {
      BottomOutputGradAt(i, plan_.vectors, plan_.dim, dz.data(), dy.data(), plan_.top_in,
                         a.bottom.back().data(), d_bottom.data());
    });
    const int64_t rows = use.row_offset.back();
    ForEachIndex(rows * plan_.dim, [&](int64_t i) {
      RowGradAt(i, plan_.vectors, plan_.dim, use.occ_offset.data(), use.occ_samples.data(),
                use.row_table.data(), dz.data(), grads + plan_.params);
    });
    dy = std::move(d_bottom);
    for (int l = static_cast<int>(plan_.bottom.size()) - 1; l >= 0; --l) {
      const LayerShape& L = plan_.bottom[l];
      const float* x =
          l > 0 ? a.bottom[l - 1].data() : in.dense_x + static_cast<int64_t>(b0) * plan_.num_dense;
      dx.resize(static_cast<size_t>(n) * L.in);
      if (std::string e = LinearBackward(L, n, x, params.data(), dy.data(), grads,
                                         l > 0 ? dx.data() : nullptr, checks);
          !e.empty()) {
        return e;
      }
      if (l > 0) {
        ForEachIndex(static_cast<int64_t>(n) * L.in,
                     [&](int64_t i) { ReluBackwardAt(i, x, dx.data()); });
        std::swap(dy, dx);
      }
    }
    return "";
  }

  const ModelPlan plan_;
  const int max_batch_;
  const int slices_;
  bool abft_ = false;
  GemmFaultInjector* injector_ = nullptr;
  int64_t abft_detections_ = 0;
  int64_t abft_cleared_ = 0;
};

}  // namespace

BodyCheck CheckGemmOnCpu(const GemmOperands& g) {
  std::vector<double> a_sum(g.k), a_sq(g.k), c_sum(g.n), ref(g.n), b_norm2(g.n);
  std::vector<int> missed(g.n);
  double a_norm2 = 0.0;
  int counts[2] = {0, 0};
  ForEachIndex(g.k, [&](int64_t i) { AbftSumRowsOfAAt(i, g, a_sum.data(), a_sq.data()); });
  ForEachIndex(1, [&](int64_t i) { AbftFrobeniusAt(i, g.k, a_sq.data(), &a_norm2); });
  ForEachIndex(g.n, [&](int64_t j) {
    AbftColumnSumsAt(j, g, a_sum.data(), c_sum.data(), ref.data(), b_norm2.data());
  });
  ForEachIndex(g.n, [&](int64_t j) {
    AbftCompareColumnAt(j, g, kAbftLambda, c_sum.data(), ref.data(), &a_norm2, b_norm2.data(),
                        missed.data());
  });
  ForEachIndex(1, [&](int64_t i) { AbftCountMissesAt(i, g.n, missed.data(), counts); });
  BodyCheck check;
  check.misses = counts[0];
  check.cleared = counts[1];
  for (int j = 0; j < g.n; ++j) {
    const double bound =
        AbftColumnBound(kAbftLambda, g.m, g.k, std::sqrt(a_norm2), std::sqrt(b_norm2[j]));
    const double ratio = std::fabs(c_sum[j] - ref[j]) / bound;
    if (std::isfinite(ratio)) check.margin = std::max(check.margin, ratio);
  }
  return check;
}

std::unique_ptr<DenseMath> CreateBodyDenseMath(const DlrmConfig& shape, int max_batch, int slices,
                                               std::string* error) {
  ModelPlan plan;
  if (std::string e = MakeModelPlan(shape, &plan); !e.empty()) {
    *error = e;
    return nullptr;
  }
  if (max_batch < 1 || slices < 1) {
    *error = "max_batch and slices must be >= 1";
    return nullptr;
  }
  return std::make_unique<BodyDenseMath>(std::move(plan), max_batch, slices);
}

}  // namespace ecps::gpu

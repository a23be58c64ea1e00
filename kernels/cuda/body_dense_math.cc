#include "kernels/cuda/body_dense_math.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda/step_plan.h"
#include "kernels/cuda/train_kernels.h"

namespace ecps::gpu {
namespace {

// y (n x out) = x (n x in) w^T, sums over i in order (cuBLAS's place on the GPU).
void MatXWt(int n, int in, int out, const float* x, const float* w, float* y) {
  for (int b = 0; b < n; ++b) {
    for (int o = 0; o < out; ++o) {
      float s = 0.0f;
      for (int i = 0; i < in; ++i)
        s += x[static_cast<int64_t>(b) * in + i] * w[static_cast<int64_t>(o) * in + i];
      y[static_cast<int64_t>(b) * out + o] = s;
    }
  }
}

// dw (out x in) = dy^T x; dx (n x in) = dy w when dx is not null.
void LinearGrads(int n, int in, int out, const float* x, const float* w, const float* dy, float* dw,
                 float* dx) {
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i) {
      float s = 0.0f;
      for (int b = 0; b < n; ++b)
        s += dy[static_cast<int64_t>(b) * out + o] * x[static_cast<int64_t>(b) * in + i];
      dw[static_cast<int64_t>(o) * in + i] = s;
    }
  }
  if (dx == nullptr) return;
  for (int b = 0; b < n; ++b) {
    for (int i = 0; i < in; ++i) {
      float s = 0.0f;
      for (int o = 0; o < out; ++o)
        s += dy[static_cast<int64_t>(b) * out + o] * w[static_cast<int64_t>(o) * in + i];
      dx[static_cast<int64_t>(b) * in + i] = s;
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

  std::string Train(const StepInput& in, StepOutput* out) override {
    if (std::string e = CheckInput(plan_, in, max_batch_, true); !e.empty()) return e;
    std::vector<float> params = FlatParams(in);
    int64_t rows = 0;
    for (int64_t c : in.row_count) rows += c;
    const int64_t grad_floats = plan_.params + rows * plan_.dim;
    std::vector<float> total(grad_floats, 0.0f), slice(grad_floats);
    std::vector<float> losses(in.batch);
    for (int part = 0; part < slices_; ++part) {
      const int b0 = SliceBegin(in.batch, slices_, part);
      const int b1 = SliceBegin(in.batch, slices_, part + 1);
      if (b1 == b0) continue;
      if (std::string e = Slice(in, params, b0, b1, slice.data(), losses.data() + b0,
                                out->probs == nullptr ? nullptr : out->probs + b0);
          !e.empty()) {
        return e;
      }
      for (int64_t i = 0; i < grad_floats; ++i) total[i] += slice[i];
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
    Forward(in, params, use, 0, in.batch, &a);
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

  void Layer(const LayerShape& l, int n, const float* x, const std::vector<float>& params,
             std::vector<float>* y) const {
    y->resize(static_cast<size_t>(n) * l.out);
    MatXWt(n, l.in, l.out, x, params.data() + l.w, y->data());
    ForEachIndex(static_cast<int64_t>(n) * l.out, [&](int64_t i) {
      BiasActivationAt(i, l.out, params.data() + l.b, l.relu, y->data());
    });
  }

  void Forward(const StepInput& in, const std::vector<float>& params, const RowUse& use, int b0,
               int b1, Activations* a) const {
    const int n = b1 - b0;
    const float* x = in.dense_x + static_cast<int64_t>(b0) * plan_.num_dense;
    a->bottom.resize(plan_.bottom.size());
    for (size_t l = 0; l < plan_.bottom.size(); ++l) {
      Layer(plan_.bottom[l], n, x, params, &a->bottom[l]);
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
      Layer(plan_.top[l], n, x, params, &a->top[l]);
      x = a->top[l].data();
    }
  }

  // The gradients of samples [b0, b1) (of the mean over the whole batch) into grads
  // (parameters, then rows), and their losses.
  std::string Slice(const StepInput& in, const std::vector<float>& params, int b0, int b1,
                    float* grads, float* losses, float* probs) const {
    RowUse use;
    if (std::string e = MakeRowUse(in, plan_.num_sparse, b0, b1, &use); !e.empty()) return e;
    const int n = b1 - b0;
    Activations a;
    Forward(in, params, use, b0, b1, &a);
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
      LinearGrads(n, L.in, L.out, x, params.data() + L.w, dy.data(), grads + L.w,
                  output ? nullptr : dx.data());
      ForEachIndex(L.out, [&](int64_t o) { BiasGradAt(o, n, L.out, dy.data(), grads + L.b); });
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
      LinearGrads(n, L.in, L.out, x, params.data() + L.w, dy.data(), grads + L.w,
                  l > 0 ? dx.data() : nullptr);
      ForEachIndex(L.out, [&](int64_t o) { BiasGradAt(o, n, L.out, dy.data(), grads + L.b); });
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
};

}  // namespace

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

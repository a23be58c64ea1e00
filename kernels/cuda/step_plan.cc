#include "kernels/cuda/step_plan.h"

#include <algorithm>
#include <cstring>

namespace ecps::gpu {

std::string MakeModelPlan(const DlrmConfig& shape, ModelPlan* plan) {
  if (shape.num_dense < 1) return "model.num_dense must be >= 1";
  if (shape.num_sparse < 1) return "model.num_sparse must be >= 1";
  if (shape.embedding_dim < 1) return "model.embedding_dim must be >= 1";
  if (shape.bottom_mlp.empty() || shape.bottom_mlp.back() != shape.embedding_dim) {
    return "model.bottom_mlp: the last width must equal model.embedding_dim (" +
           std::to_string(shape.embedding_dim) + ")";
  }
  for (int w : shape.bottom_mlp) {
    if (w < 1) return "model.bottom_mlp: widths must be >= 1";
  }
  for (int w : shape.top_mlp) {
    if (w < 1) return "model.top_mlp: widths must be >= 1";
  }
  ModelPlan p;
  p.num_dense = shape.num_dense;
  p.num_sparse = shape.num_sparse;
  p.dim = shape.embedding_dim;
  p.vectors = shape.num_sparse + 1;
  p.pairs = p.vectors * (p.vectors - 1) / 2;
  p.top_in = p.dim + p.pairs;
  int tensor = 0;
  auto add = [&](std::vector<LayerShape>* layers, int in, int out, bool relu) {
    LayerShape l;
    l.in = in;
    l.out = out;
    l.relu = relu;
    l.tensor = tensor;
    auto place = [&p](int64_t size) {
      const int64_t at = p.params;
      p.tensor_offset.push_back(at);
      p.tensor_size.push_back(size);
      p.params = (at + size + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
      return at;
    };
    l.w = place(static_cast<int64_t>(in) * out);
    l.b = place(out);
    tensor += 2;
    p.max_width = std::max({p.max_width, in, out});
    layers->push_back(l);
  };
  int in = p.num_dense;
  for (int w : shape.bottom_mlp) {
    add(&p.bottom, in, w, true);
    in = w;
  }
  in = p.top_in;
  for (int w : shape.top_mlp) {
    add(&p.top, in, w, true);
    in = w;
  }
  add(&p.top, in, 1, false);
  p.max_width = std::max({p.max_width, p.top_in, p.vectors * p.dim});
  *plan = std::move(p);
  return "";
}

std::string MakeRowUse(const StepInput& in, int num_sparse, int begin, int end, RowUse* use) {
  use->row_offset.assign(num_sparse + 1, 0);
  for (int t = 0; t < num_sparse; ++t) {
    use->row_offset[t + 1] = use->row_offset[t] + in.row_count[t];
  }
  const int64_t rows = use->row_offset[num_sparse];
  use->row_table.resize(rows);
  for (int t = 0; t < num_sparse; ++t) {
    std::fill(use->row_table.begin() + use->row_offset[t],
              use->row_table.begin() + use->row_offset[t + 1], t);
  }
  // Counting sort of the slice's (row, sample) uses by row; samples stay ascending.
  use->occ_offset.assign(rows + 1, 0);
  for (int s = begin; s < end; ++s) {
    for (int t = 0; t < num_sparse; ++t) {
      const int32_t r = in.index[static_cast<int64_t>(s) * num_sparse + t];
      if (r < 0 || r >= in.row_count[t]) {
        return "sample " + std::to_string(s) + " of table " + std::to_string(t) +
               " names unique row " + std::to_string(r) + " of " + std::to_string(in.row_count[t]);
      }
      ++use->occ_offset[use->row_offset[t] + r + 1];
    }
  }
  for (int64_t u = 0; u < rows; ++u) use->occ_offset[u + 1] += use->occ_offset[u];
  use->occ_samples.resize(static_cast<size_t>(end - begin) * num_sparse);
  std::vector<int64_t> next(use->occ_offset.begin(), use->occ_offset.end() - 1);
  for (int s = begin; s < end; ++s) {
    for (int t = 0; t < num_sparse; ++t) {
      const int32_t r = in.index[static_cast<int64_t>(s) * num_sparse + t];
      use->occ_samples[next[use->row_offset[t] + r]++] = s - begin;
    }
  }
  return "";
}

void GatherParams(const ModelPlan& plan, const StepInput& in, float* flat) {
  for (size_t t = 0; t < plan.tensor_size.size(); ++t) {
    std::memcpy(flat + plan.tensor_offset[t], in.params[t], sizeof(float) * plan.tensor_size[t]);
  }
}

void ScatterGrads(const ModelPlan& plan, const StepInput& in, const float* flat, StepOutput* out) {
  for (size_t t = 0; t < plan.tensor_size.size(); ++t) {
    std::memcpy(out->dense_grads[t], flat + plan.tensor_offset[t],
                sizeof(float) * plan.tensor_size[t]);
  }
  const float* at = flat + plan.params;
  for (int t = 0; t < plan.num_sparse; ++t) {
    const int64_t n = in.row_count[t] * plan.dim;
    std::memcpy(out->row_grads[t], at, sizeof(float) * n);
    at += n;
  }
}

std::string CheckInput(const ModelPlan& plan, const StepInput& in, int max_batch,
                       bool need_labels) {
  if (in.batch < 1 || in.batch > max_batch) {
    return "batch of " + std::to_string(in.batch) + " samples; this trainer takes 1.." +
           std::to_string(max_batch);
  }
  if (in.dense_x == nullptr || in.index == nullptr || (need_labels && in.labels == nullptr)) {
    return "missing dense features, labels or row indices";
  }
  if (static_cast<int>(in.rows.size()) != plan.num_sparse ||
      static_cast<int>(in.row_count.size()) != plan.num_sparse) {
    return "expected rows of " + std::to_string(plan.num_sparse) + " tables";
  }
  for (int t = 0; t < plan.num_sparse; ++t) {
    if (in.row_count[t] < 1 || in.row_count[t] > in.batch || in.rows[t] == nullptr) {
      return "table " + std::to_string(t) + ": " + std::to_string(in.row_count[t]) +
             " unique rows for a batch of " + std::to_string(in.batch);
    }
  }
  if (in.params.size() != plan.tensor_size.size()) {
    return "expected " + std::to_string(plan.tensor_size.size()) + " dense tensors";
  }
  for (const float* p : in.params) {
    if (p == nullptr) return "a dense tensor is missing";
  }
  return "";
}

std::string AskInjector(GemmFaultInjector* injector, int site, const GemmOperands& g,
                        int64_t* flip_element, int* flip_bit) {
  *flip_element = -1;
  *flip_bit = 0;
  if (injector == nullptr) return "";
  GemmCall call;
  call.ta = g.ta;
  call.tb = g.tb;
  call.m = g.m;
  call.n = g.n;
  call.k = g.k;
  call.a = g.a;
  call.lda = g.lda;
  call.b = g.b;
  call.ldb = g.ldb;
  call.c = g.c;
  call.ldc = g.ldc;
  GemmFault fault;
  if (!injector->Inject(site, call, &fault)) return "";
  if (fault.where != GemmFault::kOutput) {
    return "ABFT fault injection: the GPU path flips GEMM outputs only (site " +
           std::to_string(site) + ")";
  }
  if (fault.element < 0 || fault.element >= static_cast<int64_t>(g.m) * g.ldc) {
    return "ABFT fault injection: element " + std::to_string(fault.element) +
           " is outside the output of GEMM site " + std::to_string(site);
  }
  *flip_element = fault.element;
  *flip_bit = fault.bit;
  return "";
}

void AbftScratchSizes(const ModelPlan& plan, int batch, int* k_max, int* n_max) {
  *k_max = std::max(batch, 1);
  *n_max = 1;
  for (const auto* layers : {&plan.bottom, &plan.top}) {
    for (const LayerShape& l : *layers) {
      *k_max = std::max({*k_max, l.in, l.out});
      *n_max = std::max({*n_max, l.in, l.out});
    }
  }
}

std::string AbftGiveUp(int misses) {
  return "ABFT: the dense step failed its GEMM checksums " + std::to_string(kAbftRetries + 1) +
         " times in a row (" + std::to_string(misses) +
         " columns the last time): this machine computes wrongly";
}

}  // namespace ecps::gpu

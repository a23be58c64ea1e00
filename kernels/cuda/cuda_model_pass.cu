#include "kernels/cuda/cuda_model_pass.cuh"

namespace ecps::gpu {

std::string ModelPass::RunGemm(Replica* r, const GemmOperands& g, int site, bool check) const {
  int64_t flip = -1;
  int bit = 0;
  if (check) ECPS_TRY(AskInjector(injector, site, g, &flip, &bit));
  const float one = 1.0f, zero = 0.0f;
  ECPS_CUBLAS_TRY(cublasSgemm(r->blas, g.tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                              g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.m, g.k, &one, g.b, g.ldb,
                              g.a, g.lda, &zero, g.c, g.ldc));
  if (check) ECPS_TRY(r->checks.Check(g, flip, bit, r->compute));
  return "";
}

std::string ModelPass::LinearForward(Replica* r, LtLayer* lt, const LayerShape& L, int n,
                                     const float* x, const float* params, bool check,
                                     float* y) const {
  const float* w = params + L.w;
  const float* bias = params + L.b;
  const float one = 1.0f, zero = 0.0f;
  if (lt->batch != n) {
    lt->Release();
    lt->batch = n;
    lt->fused = false;
    ECPS_CUBLAS_TRY(cublasLtMatmulDescCreate(&lt->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ECPS_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    ECPS_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    const cublasLtEpilogue_t epilogue =
        L.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    ECPS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof(epilogue)));
    // Column-major views of the row-major tensors: W (out x in) is in x out, x (n x in) is
    // in x n, y (n x out) is out x n; y^T = W x^T with W transposed.
    ECPS_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&lt->a, CUDA_R_32F, L.in, L.out, L.in));
    ECPS_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&lt->b, CUDA_R_32F, L.in, n, L.in));
    ECPS_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&lt->c, CUDA_R_32F, L.out, n, L.out));
    cublasLtMatmulPreference_t pref = nullptr;
    ECPS_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const size_t workspace = kLtWorkspace;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof(workspace));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    // The bias pointer is set per call; the heuristic only needs its presence.
    ECPS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)));
    const cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(r->lt, lt->op, lt->a, lt->b, lt->c,
                                                            lt->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (h == CUBLAS_STATUS_SUCCESS && found > 0) {
      lt->algo = result.algo;
      lt->fused = true;
    }
  }
  if (lt->fused && !check) {
    ECPS_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(lt->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)));
    ECPS_CUBLAS_TRY(cublasLtMatmul(r->lt, lt->op, &one, w, lt->a, x, lt->b, &zero, y, lt->c, y,
                                   lt->c, &lt->algo, r->lt_workspace.p, kLtWorkspace, r->compute));
    return "";
  }
  ECPS_TRY(
      RunGemm(r, ForwardGemm(n, L.in, L.out, x, w, y), AbftSite(L, LayerProduct::kForward), check));
  const int out = L.out;
  const bool relu = L.relu;
  return Launch(static_cast<int64_t>(n) * L.out, r->compute,
                [=] __device__(int64_t i) { BiasActivationAt(i, out, bias, relu, y); });
}

std::string ModelPass::LinearBackward(Replica* r, const LayerShape& L, int n, const float* x,
                                      const float* params, const float* dy, float* grads,
                                      float* dx) const {
  ECPS_TRY(RunGemm(r, WeightGradGemm(n, L.in, L.out, dy, x, grads + L.w),
                   AbftSite(L, LayerProduct::kWeightGrad), abft));
  float* db = grads + L.b;
  const int out = L.out;
  ECPS_TRY(Launch(L.out, r->compute, [=] __device__(int64_t o) { BiasGradAt(o, n, out, dy, db); }));
  if (dx != nullptr) {
    ECPS_TRY(RunGemm(r, InputGradGemm(n, L.in, L.out, dy, params + L.w, dx),
                     AbftSite(L, LayerProduct::kInputGrad), abft));
  }
  return "";
}

std::string ModelPass::Forward(Replica* r, const Slot& slot, bool check) const {
  const int n = slot.b1 - slot.b0;
  const float* params = slot.params.p;
  const float* x = slot.dense_x.p;
  for (size_t l = 0; l < plan.bottom.size(); ++l) {
    ECPS_TRY(LinearForward(r, &r->lt_bottom[l], plan.bottom[l], n, x, params, check,
                           r->bottom_act[l].p));
    x = r->bottom_act[l].p;
  }
  const int T = plan.num_sparse, dim = plan.dim, vectors = plan.vectors, top_in = plan.top_in;
  const float* rows = slot.rows_data.p;
  const int64_t* row_offset = slot.row_offset.p;
  const int32_t* index = slot.index.p;
  float* z = r->z.p;
  float* tin = r->top_in.p;
  ECPS_TRY(Launch(static_cast<int64_t>(n) * vectors * dim, r->compute, [=] __device__(int64_t i) {
    GatherInteractionInputAt(i, T, dim, x, rows, row_offset, index, z, tin, top_in);
  }));
  ECPS_TRY(Launch(static_cast<int64_t>(n) * plan.pairs, r->compute, [=] __device__(int64_t i) {
    InteractionForwardAt(i, vectors, dim, z, tin + dim, top_in);
  }));
  x = r->top_in.p;
  for (size_t l = 0; l < plan.top.size(); ++l) {
    ECPS_TRY(LinearForward(r, &r->lt_top[l], plan.top[l], n, x, params, check, r->top_act[l].p));
    x = r->top_act[l].p;
  }
  return "";
}

std::string ModelPass::Backward(Replica* r, const Slot& slot, float inv_batch,
                                bool want_probs) const {
  const int n = slot.b1 - slot.b0;
  const int64_t grad_floats = plan.params + slot.rows * plan.dim;
  if (n == 0) {  // a GPU with no samples (a batch smaller than the GPUs) adds nothing
    ECPS_CUDA_TRY(cudaMemsetAsync(r->grads.p, 0, grad_floats * sizeof(float), r->compute));
    return "";
  }
  ECPS_TRY(Forward(r, slot, abft));
  const float* logits = r->top_act.back().p;
  const float* labels = slot.labels.p;
  float* losses = r->losses.p;
  float* d_logits = r->d_logits.p;
  float* probs = want_probs ? r->probs.p : nullptr;
  ECPS_TRY(Launch(n, r->compute, [=] __device__(int64_t b) {
    BceAt(b, logits, labels, inv_batch, losses, d_logits, probs);
  }));
  const float* params = slot.params.p;
  float* grads = r->grads.p;
  const float* dy = d_logits;
  float* bufs[2] = {r->grad_a.p, r->grad_b.p};
  int next = 0;
  for (int l = static_cast<int>(plan.top.size()) - 1; l >= 0; --l) {
    const LayerShape& L = plan.top[l];
    const float* x = l > 0 ? r->top_act[l - 1].p : r->top_in.p;
    float* dx = bufs[next];
    if (l == static_cast<int>(plan.top.size()) - 1) {
      // The output layer: its input's gradient straight from the logits (the loss fused
      // in), masked by that input's ReLU; only dW and db go through LinearBackward.
      ECPS_TRY(LinearBackward(r, L, n, x, params, dy, grads, nullptr));
      const int in = L.in;
      const float* w = params + L.w;
      const bool relu_input = l > 0;
      ECPS_TRY(Launch(static_cast<int64_t>(n) * in, r->compute, [=] __device__(int64_t i) {
        OutputLayerInputGradAt(i, in, logits, labels, inv_batch, w, x, relu_input, dx);
      }));
    } else {
      ECPS_TRY(LinearBackward(r, L, n, x, params, dy, grads, dx));
    }
    if (l > 0 && l != static_cast<int>(plan.top.size()) - 1) {
      ECPS_TRY(Launch(static_cast<int64_t>(n) * L.in, r->compute,
                      [=] __device__(int64_t i) { ReluBackwardAt(i, x, dx); }));
    }
    dy = dx;
    next ^= 1;
  }
  const int vectors = plan.vectors, dim = plan.dim, top_in = plan.top_in;
  const float* z = r->z.p;
  float* dz = r->dz.p;
  ECPS_TRY(Launch(static_cast<int64_t>(n) * vectors * dim, r->compute, [=] __device__(int64_t i) {
    InteractionBackwardAt(i, vectors, dim, z, dy + dim, top_in, dz);
  }));
  float* d_bottom = bufs[next];
  next ^= 1;
  const float* bottom_out = r->bottom_act.back().p;
  ECPS_TRY(Launch(static_cast<int64_t>(n) * dim, r->compute, [=] __device__(int64_t i) {
    BottomOutputGradAt(i, vectors, dim, dz, dy, top_in, bottom_out, d_bottom);
  }));
  const int64_t* occ_offset = slot.occ_offset.p;
  const int32_t* occ_samples = slot.occ_samples.p;
  const int32_t* row_table = slot.row_table.p;
  float* row_grads = grads + plan.params;
  ECPS_TRY(Launch(slot.rows * dim, r->compute, [=] __device__(int64_t i) {
    RowGradAt(i, vectors, dim, occ_offset, occ_samples, row_table, dz, row_grads);
  }));
  dy = d_bottom;
  for (int l = static_cast<int>(plan.bottom.size()) - 1; l >= 0; --l) {
    const LayerShape& L = plan.bottom[l];
    const float* x = l > 0 ? r->bottom_act[l - 1].p : slot.dense_x.p;
    float* dx = l > 0 ? bufs[next] : nullptr;
    ECPS_TRY(LinearBackward(r, L, n, x, params, dy, grads, dx));
    if (l > 0) {
      ECPS_TRY(Launch(static_cast<int64_t>(n) * L.in, r->compute,
                      [=] __device__(int64_t i) { ReluBackwardAt(i, x, dx); }));
      dy = dx;
      next ^= 1;
    }
  }
  return "";
}

}  // namespace ecps::gpu

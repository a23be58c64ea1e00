// The CUDA DenseMath (cuda_dense_math.h): a step's inputs staged on every GPU, the model's
// passes run on each (cuda_model_pass.cuh: cuBLASLt/cuBLAS for the MLPs, train_kernels.h's
// bodies for everything else), NCCL across GPUs, the results copied back, a step that missed
// its ABFT checks computed again; and what the worker asks of CUDA itself.
#include <cuda_runtime.h>
#if ECPS_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "kernels/abft.h"
#include "kernels/cuda/cuda_abft.cuh"
#include "kernels/cuda/cuda_dense_math.h"
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_model_pass.cuh"
#include "kernels/cuda/step_plan.h"
#include "kernels/cuda/train_kernels.h"

namespace ecps::gpu {
namespace {

#if ECPS_HAVE_NCCL
#define ECPS_NCCL_TRY(expr)                                          \
  do {                                                               \
    const ncclResult_t ecps_r = (expr);                              \
    if (ecps_r != ncclSuccess) {                                     \
      return std::string(#expr) + ": " + ncclGetErrorString(ecps_r); \
    }                                                                \
  } while (0)
#endif

class CudaDenseMath final : public DenseMath {
 public:
  CudaDenseMath(ModelPlan plan, int max_batch, int gpus)
      : plan_(std::move(plan)), max_batch_(max_batch), replicas_(gpus) {}

  ~CudaDenseMath() override {
    for (auto& r : replicas_) {
      cudaSetDevice(r.device);
      if (r.compute != nullptr) cudaStreamSynchronize(r.compute);
      if (r.copy != nullptr) cudaStreamSynchronize(r.copy);
      for (auto& l : r.lt_bottom) l.Release();
      for (auto& l : r.lt_top) l.Release();
      for (auto& s : r.slots) {
        if (s.copied != nullptr) cudaEventDestroy(s.copied);
      }
#if ECPS_HAVE_NCCL
      if (r.comm != nullptr) ncclCommDestroy(r.comm);
#endif
      if (r.blas != nullptr) cublasDestroy(r.blas);
      if (r.lt != nullptr) cublasLtDestroy(r.lt);
      if (r.compute != nullptr) cudaStreamDestroy(r.compute);
      if (r.copy != nullptr) cudaStreamDestroy(r.copy);
    }
  }

  std::string Init() {
    for (size_t g = 0; g < replicas_.size(); ++g) {
      Replica& r = replicas_[g];
      r.device = static_cast<int>(g);
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_CUDA_TRY(cudaStreamCreateWithFlags(&r.compute, cudaStreamNonBlocking));
      ECPS_CUDA_TRY(cudaStreamCreateWithFlags(&r.copy, cudaStreamNonBlocking));
      for (auto& s : r.slots) {
        ECPS_CUDA_TRY(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
      }
      ECPS_CUBLAS_TRY(cublasCreate(&r.blas));
      ECPS_CUBLAS_TRY(cublasSetStream(r.blas, r.compute));
      ECPS_CUBLAS_TRY(cublasLtCreate(&r.lt));
      ECPS_TRY(r.lt_workspace.Reserve(kLtWorkspace));
      r.lt_bottom.resize(plan_.bottom.size());
      r.lt_top.resize(plan_.top.size());
      // Activations for the largest slice.
      const size_t b = static_cast<size_t>(SliceBegin(max_batch_, Gpus(), 1)) + 1;
      r.bottom_act.resize(plan_.bottom.size());
      for (size_t l = 0; l < plan_.bottom.size(); ++l) {
        ECPS_TRY(r.bottom_act[l].Reserve(b * plan_.bottom[l].out));
      }
      r.top_act.resize(plan_.top.size());
      for (size_t l = 0; l < plan_.top.size(); ++l) {
        ECPS_TRY(r.top_act[l].Reserve(b * plan_.top[l].out));
      }
      const size_t zs = b * plan_.vectors * plan_.dim;
      ECPS_TRY(r.z.Reserve(zs));
      ECPS_TRY(r.dz.Reserve(zs));
      ECPS_TRY(r.top_in.Reserve(b * plan_.top_in));
      ECPS_TRY(r.grad_a.Reserve(b * plan_.max_width));
      ECPS_TRY(r.grad_b.Reserve(b * plan_.max_width));
      ECPS_TRY(r.d_logits.Reserve(b));
      ECPS_TRY(r.losses.Reserve(b));
      ECPS_TRY(r.probs.Reserve(b));
    }
#if ECPS_HAVE_NCCL
    if (Gpus() > 1) {
      std::vector<ncclComm_t> comms(Gpus());
      std::vector<int> devices(Gpus());
      for (int g = 0; g < Gpus(); ++g) devices[g] = g;
      ECPS_NCCL_TRY(ncclCommInitAll(comms.data(), Gpus(), devices.data()));
      for (int g = 0; g < Gpus(); ++g) replicas_[g].comm = comms[g];
    }
#endif
    return "";
  }

  const char* device() const override { return "cuda"; }

  std::string Stage(const StepInput& in) override {
    ECPS_TRY(CheckInput(plan_, in, max_batch_, true));
    if (staged_.size() >= 2) return "two steps are staged already: Train one first";
    const int s = next_slot_;
    next_slot_ ^= 1;
    ECPS_TRY(StageInto(s, in, Gpus()));
    staged_.push_back(s);
    return "";
  }

  std::string SetAbft(bool on, GemmFaultInjector* injector) override {
    abft_ = on;
    injector_ = on ? injector : nullptr;
    if (!on) return "";
    int k_max = 0, n_max = 0;
    AbftScratchSizes(plan_, max_batch_, &k_max, &n_max);
    for (Replica& r : replicas_) {
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_TRY(r.checks.Reserve(k_max, n_max));
    }
    return out_misses_.Reserve(2 * static_cast<size_t>(Gpus()));
  }
  int64_t abft_detections() const override { return abft_detections_; }
  int64_t abft_cleared() const override { return abft_cleared_; }

  std::string Train(const StepInput& in, StepOutput* out) override {
    if (staged_.empty()) return "no step is staged";
    const int s = staged_.front();
    staged_.pop_front();
    if (in.batch != batch_[s]) return "Train's batch is not the one staged";
    // The step's inputs stay in slot s until the next Stage into it, so a step that missed
    // its checks is computed again from them; every output of an attempt is overwritten by
    // the next.
    for (int attempt = 0;; ++attempt) {
      int misses = 0, cleared = 0;
      ECPS_TRY(RunStep(s, in, out, &misses, &cleared));
      abft_cleared_ += cleared;
      if (misses == 0) break;
      ++abft_detections_;
      if (attempt == kAbftRetries) return AbftGiveUp(misses);
    }
    double loss = 0.0;
    for (int b = 0; b < in.batch; ++b) loss += out_losses_.p[b];
    out->loss = loss / in.batch;
    if (out->probs != nullptr) std::memcpy(out->probs, out_probs_.p, sizeof(float) * in.batch);
    ScatterGrads(plan_, in, out_grads_.p, out);
    return "";
  }

  std::string Predict(const StepInput& in, float* probs) override {
    ECPS_TRY(CheckInput(plan_, in, max_batch_, false));
    constexpr int kPredictSlot = 2;
    ECPS_TRY(StageInto(kPredictSlot, in, 1));
    Replica& r = replicas_[0];
    Slot& slot = r.slots[kPredictSlot];
    ECPS_CUDA_TRY(cudaSetDevice(r.device));
    ECPS_CUDA_TRY(cudaStreamWaitEvent(r.compute, slot.copied, 0));
    ECPS_TRY(r.grad_a.Reserve(static_cast<size_t>(in.batch) * plan_.max_width));
    ECPS_TRY(EnsureActivations(&r, in.batch));
    ECPS_TRY(Pass().Forward(&r, slot, /*check=*/false));
    const float* logits = r.top_act.back().p;
    float* d_probs = r.probs.p;
    ECPS_TRY(
        Launch(in.batch, r.compute, [=] __device__(int64_t b) { SigmoidAt(b, logits, d_probs); }));
    ECPS_TRY(out_probs_.Reserve(in.batch));
    ECPS_CUDA_TRY(cudaMemcpyAsync(out_probs_.p, r.probs.p, in.batch * sizeof(float),
                                  cudaMemcpyDeviceToHost, r.compute));
    ECPS_CUDA_TRY(cudaStreamSynchronize(r.compute));
    std::memcpy(probs, out_probs_.p, sizeof(float) * in.batch);
    return "";
  }

 private:
  // One attempt at the step of slot s: every GPU's slice, the all-reduce, the results copied
  // to the pinned out_* buffers, and with ABFT the columns that missed their checks and those
  // whose miss was cleared, summed over the GPUs, in *misses and *cleared (copied back with the
  // results: one synchronisation a step).
  std::string RunStep(int s, const StepInput& in, const StepOutput* out, int* misses,
                      int* cleared) {
    int64_t rows = replicas_[0].slots[s].rows;
    const int64_t grad_floats = plan_.params + rows * plan_.dim;
    const float inv = 1.0f / static_cast<float>(in.batch);
    for (Replica& r : replicas_) {
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_TRY(r.grads.Reserve(grad_floats));
      ECPS_CUDA_TRY(cudaStreamWaitEvent(r.compute, r.slots[s].copied, 0));
      if (abft_) ECPS_TRY(r.checks.StartStep(r.compute));
      ECPS_TRY(Pass().Backward(&r, r.slots[s], inv, out->probs != nullptr));
    }
#if ECPS_HAVE_NCCL
    if (Gpus() > 1) {
      ncclGroupStart();
      for (Replica& r : replicas_) {
        const ncclResult_t e =
            ncclAllReduce(r.grads.p, r.grads.p, grad_floats, ncclFloat, ncclSum, r.comm, r.compute);
        if (e != ncclSuccess) {
          ncclGroupEnd();
          return std::string("ncclAllReduce: ") + ncclGetErrorString(e);
        }
      }
      ECPS_NCCL_TRY(ncclGroupEnd());
    }
#endif
    // Back to the host: the summed gradients from the first GPU, every GPU's losses (and
    // probabilities) for its samples.
    ECPS_TRY(out_grads_.Reserve(grad_floats));
    ECPS_TRY(out_losses_.Reserve(in.batch));
    ECPS_TRY(out_probs_.Reserve(in.batch));
    {
      Replica& r = replicas_[0];
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_CUDA_TRY(cudaMemcpyAsync(out_grads_.p, r.grads.p, grad_floats * sizeof(float),
                                    cudaMemcpyDeviceToHost, r.compute));
    }
    for (Replica& r : replicas_) {
      const Slot& slot = r.slots[s];
      const int n = slot.b1 - slot.b0;
      if (n == 0) continue;
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_CUDA_TRY(cudaMemcpyAsync(out_losses_.p + slot.b0, r.losses.p, n * sizeof(float),
                                    cudaMemcpyDeviceToHost, r.compute));
      if (out->probs != nullptr) {
        ECPS_CUDA_TRY(cudaMemcpyAsync(out_probs_.p + slot.b0, r.probs.p, n * sizeof(float),
                                      cudaMemcpyDeviceToHost, r.compute));
      }
    }
    for (int g = 0; g < Gpus() && abft_; ++g) {
      Replica& r = replicas_[g];
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_TRY(r.checks.CopyCountAsync(out_misses_.p + 2 * g, r.compute));
    }
    for (Replica& r : replicas_) {
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_CUDA_TRY(cudaStreamSynchronize(r.compute));
    }
    *misses = 0;
    *cleared = 0;
    for (int g = 0; g < Gpus() && abft_; ++g) {
      *misses += out_misses_.p[2 * g];
      *cleared += out_misses_.p[2 * g + 1];
    }
    return "";
  }

  int Gpus() const { return static_cast<int>(replicas_.size()); }
  // The model's passes, training's GEMMs checked as SetAbft said.
  ModelPass Pass() const { return ModelPass{plan_, abft_, injector_}; }

  // Predict may take the whole batch on the first GPU: activations for it.
  std::string EnsureActivations(Replica* r, int batch) {
    const size_t b = static_cast<size_t>(batch);
    for (size_t l = 0; l < plan_.bottom.size(); ++l) {
      ECPS_TRY(r->bottom_act[l].Reserve(b * plan_.bottom[l].out));
    }
    for (size_t l = 0; l < plan_.top.size(); ++l)
      ECPS_TRY(r->top_act[l].Reserve(b * plan_.top[l].out));
    ECPS_TRY(r->z.Reserve(b * plan_.vectors * plan_.dim));
    ECPS_TRY(r->top_in.Reserve(b * plan_.top_in));
    ECPS_TRY(r->probs.Reserve(b));
    return "";
  }

  // Host copy into pinned memory, then the asynchronous copies to every GPU of `parts`
  // (Predict: the first only, the whole batch).
  std::string StageInto(int s, const StepInput& in, int parts) {
    int64_t rows = 0;
    for (int64_t c : in.row_count) rows += c;
    const int T = plan_.num_sparse, dim = plan_.dim;
    // The pinned buffers of this slot are free once its last copies finished.
    for (Replica& r : replicas_) {
      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      ECPS_CUDA_TRY(cudaEventSynchronize(r.slots[s].copied));
    }
    Shared& sh = shared_[s];
    ECPS_TRY(sh.dense_x.Reserve(static_cast<size_t>(in.batch) * plan_.num_dense));
    ECPS_TRY(sh.labels.Reserve(in.batch));
    ECPS_TRY(sh.rows.Reserve(rows * dim));
    ECPS_TRY(sh.params.Reserve(plan_.params));
    std::memcpy(sh.dense_x.p, in.dense_x, sizeof(float) * in.batch * plan_.num_dense);
    if (in.labels != nullptr) std::memcpy(sh.labels.p, in.labels, sizeof(float) * in.batch);
    float* at = sh.rows.p;
    for (int t = 0; t < T; ++t) {
      std::memcpy(at, in.rows[t], sizeof(float) * in.row_count[t] * dim);
      at += in.row_count[t] * dim;
    }
    GatherParams(plan_, in, sh.params.p);
    batch_[s] = in.batch;
    for (int g = 0; g < Gpus(); ++g) {
      Replica& r = replicas_[g];
      Slot& slot = r.slots[s];
      slot.b0 = g < parts ? SliceBegin(in.batch, parts, g) : 0;
      slot.b1 = g < parts ? SliceBegin(in.batch, parts, g + 1) : 0;
      slot.rows = rows;
      if (g >= parts) continue;
      const int n = slot.b1 - slot.b0;
      ECPS_TRY(MakeRowUse(in, T, slot.b0, slot.b1, &slot.use));
      // Pinned: index (n*T), occ_samples (n*T), row_table (rows); row_offset (T+1),
      // occ_offset (rows+1).
      const size_t ints = static_cast<size_t>(n) * T * 2 + rows;
      ECPS_TRY(slot.pinned_index.Reserve(ints));
      ECPS_TRY(slot.pinned_offsets.Reserve(T + 1 + rows + 1));
      int32_t* pi = slot.pinned_index.p;
      std::memcpy(pi, in.index + static_cast<int64_t>(slot.b0) * T, sizeof(int32_t) * n * T);
      std::memcpy(pi + n * T, slot.use.occ_samples.data(), sizeof(int32_t) * n * T);
      std::memcpy(pi + 2 * n * T, slot.use.row_table.data(), sizeof(int32_t) * rows);
      int64_t* po = slot.pinned_offsets.p;
      std::memcpy(po, slot.use.row_offset.data(), sizeof(int64_t) * (T + 1));
      std::memcpy(po + T + 1, slot.use.occ_offset.data(), sizeof(int64_t) * (rows + 1));

      ECPS_CUDA_TRY(cudaSetDevice(r.device));
      cudaStream_t cs = r.copy;
      ECPS_TRY(CopyIn(&slot.dense_x, sh.dense_x.p + static_cast<int64_t>(slot.b0) * plan_.num_dense,
                      static_cast<size_t>(n) * plan_.num_dense, cs));
      if (in.labels != nullptr) ECPS_TRY(CopyIn(&slot.labels, sh.labels.p + slot.b0, n, cs));
      ECPS_TRY(CopyIn(&slot.rows_data, sh.rows.p, rows * dim, cs));
      ECPS_TRY(CopyIn(&slot.params, sh.params.p, plan_.params, cs));
      ECPS_TRY(CopyIn(&slot.index, pi, static_cast<size_t>(n) * T, cs));
      ECPS_TRY(CopyIn(&slot.occ_samples, pi + n * T, static_cast<size_t>(n) * T, cs));
      ECPS_TRY(CopyIn(&slot.row_table, pi + 2 * n * T, rows, cs));
      ECPS_TRY(CopyIn(&slot.row_offset, po, T + 1, cs));
      ECPS_TRY(CopyIn(&slot.occ_offset, po + T + 1, rows + 1, cs));
      ECPS_CUDA_TRY(cudaEventRecord(slot.copied, cs));
    }
    return "";
  }

  // The pinned host side of a slot's inputs shared by every GPU (rows and parameters go to
  // each; the per-GPU index arrays live in the replicas' slots).
  struct Shared {
    PinnedArray<float> dense_x, labels, rows, params;
  };

  const ModelPlan plan_;
  const int max_batch_;
  std::vector<Replica> replicas_;
  Shared shared_[3];
  int batch_[3] = {0, 0, 0};
  int next_slot_ = 0;
  std::deque<int> staged_;
  PinnedArray<float> out_grads_, out_losses_, out_probs_;
  bool abft_ = false;
  GemmFaultInjector* injector_ = nullptr;
  int64_t abft_detections_ = 0;
  int64_t abft_cleared_ = 0;
  PinnedArray<int> out_misses_;  // per GPU, the columns that missed and that were cleared (ABFT)
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear it: no device is not an error of later calls
    return 0;
  }
  return n;
}

std::unique_ptr<DenseMath> CreateCudaDenseMath(const DlrmConfig& shape, int max_batch, int gpus,
                                               std::string* error) {
  ModelPlan plan;
  if (std::string e = MakeModelPlan(shape, &plan); !e.empty()) {
    *error = e;
    return nullptr;
  }
  if (max_batch < 1) {
    *error = "max_batch must be >= 1";
    return nullptr;
  }
  const int have = CudaDeviceCount();
  if (gpus < 1 || gpus > have) {
    *error = "asked for " + std::to_string(gpus) + " GPU(s); this machine has " +
             std::to_string(have) + " usable CUDA device(s)";
    return nullptr;
  }
#if !ECPS_HAVE_NCCL
  if (gpus > 1) {
    *error = "more than one GPU per worker needs NCCL, and this build has none";
    return nullptr;
  }
#endif
  auto trainer = std::make_unique<CudaDenseMath>(std::move(plan), max_batch, gpus);
  if (std::string e = trainer->Init(); !e.empty()) {
    *error = e;
    return nullptr;
  }
  return trainer;
}

std::string ApplyDenseUpdateAsync(const DenseUpdateRule& rule, int64_t step, int64_t size,
                                  const float* grad, float* weights, float* state, void* stream) {
  if (size < 0 || grad == nullptr || weights == nullptr ||
      (rule.kind != DenseUpdateRule::kSgd && state == nullptr)) {
    return "a dense update needs its gradient, weights and (but for sgd) state";
  }
  auto s = static_cast<cudaStream_t>(stream);
  const float lr = rule.lr, eps = rule.eps, b1 = rule.beta1, b2 = rule.beta2;
  switch (rule.kind) {
    case DenseUpdateRule::kSgd:
      return Launch(size, s, [=] __device__(int64_t i) { SgdAt(i, lr, grad, weights); });
    case DenseUpdateRule::kAdagrad:
      return Launch(size, s,
                    [=] __device__(int64_t i) { AdagradAt(i, lr, eps, grad, weights, state); });
    case DenseUpdateRule::kAdam: {
      float c1 = 0, c2 = 0;
      AdamCorrections(b1, b2, step, &c1, &c2);
      float* m = state;
      float* v = state + size;
      return Launch(size, s, [=] __device__(int64_t i) {
        AdamAt(i, lr, b1, b2, eps, c1, c2, grad, weights, m, v);
      });
    }
  }
  return "unknown dense update rule";
}

std::string TimeAllReduce(int gpus, int64_t floats, int repeats, double* median_us) {
#if !ECPS_HAVE_NCCL
  (void)gpus;
  (void)floats;
  (void)repeats;
  (void)median_us;
  return "this build has no NCCL";
#else
  if (gpus < 1 || gpus > CudaDeviceCount()) return "not enough CUDA devices";
  std::vector<ncclComm_t> comms(gpus);
  std::vector<int> devices(gpus);
  for (int g = 0; g < gpus; ++g) devices[g] = g;
  ECPS_NCCL_TRY(ncclCommInitAll(comms.data(), gpus, devices.data()));
  std::vector<float*> buffers(gpus, nullptr);
  std::vector<cudaStream_t> streams(gpus, nullptr);
  std::string error;
  for (int g = 0; g < gpus && error.empty(); ++g) {
    cudaSetDevice(g);
    if (cudaMalloc(reinterpret_cast<void**>(&buffers[g]), floats * sizeof(float)) != cudaSuccess ||
        cudaMemset(buffers[g], 0, floats * sizeof(float)) != cudaSuccess ||
        cudaStreamCreate(&streams[g]) != cudaSuccess) {
      error = "cannot allocate the all-reduce buffers";
    }
  }
  std::vector<double> times;
  for (int rep = -2; rep < repeats && error.empty(); ++rep) {  // two untimed warm-ups
    const auto t0 = std::chrono::steady_clock::now();
    ncclGroupStart();
    for (int g = 0; g < gpus; ++g) {
      ncclAllReduce(buffers[g], buffers[g], floats, ncclFloat, ncclSum, comms[g], streams[g]);
    }
    if (ncclGroupEnd() != ncclSuccess) error = "ncclAllReduce failed";
    for (int g = 0; g < gpus; ++g) {
      cudaSetDevice(g);
      if (cudaStreamSynchronize(streams[g]) != cudaSuccess) error = "all-reduce stream failed";
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (rep >= 0) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  for (int g = 0; g < gpus; ++g) {
    cudaSetDevice(g);
    if (buffers[g] != nullptr) cudaFree(buffers[g]);
    if (streams[g] != nullptr) cudaStreamDestroy(streams[g]);
    ncclCommDestroy(comms[g]);
  }
  if (!error.empty()) return error;
  if (times.empty()) return "no repeats";
  std::sort(times.begin(), times.end());
  *median_us = times[times.size() / 2];
  return "";
#endif
}

}  // namespace ecps::gpu

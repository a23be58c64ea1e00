// The CPU DenseMath (kernels/dense_math.h): the worker's step as it has always run, pooling,
// Dlrm::ForwardBackward and the row-gradient sums on the model's threads
// (cluster.worker_threads), OpenBLAS for the GEMMs. Its results are bit-identical to
// LocalTrainer's (the same functions, kernels/pooling.h).
#ifndef ECPS_KERNELS_CPU_DENSE_MATH_H_
#define ECPS_KERNELS_CPU_DENSE_MATH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dense_math.h"
#include "kernels/dlrm.h"

namespace ecps {

class CpuDenseMath final : public DenseMath {
 public:
  explicit CpuDenseMath(Dlrm* model) : model_(model) {}  // `model` must outlive this
  const char* device() const override { return "cpu"; }
  // The CPU reads the inputs when it trains: staging only checks them.
  std::string Stage(const StepInput& in) override;
  std::string Train(const StepInput& in, StepOutput* out) override;
  std::string Predict(const StepInput& in, float* probs) override;

  // ABFT (Dlrm::SetAbft): a step whose GEMM checks miss is computed again, up to
  // kAbftRetries (kernels/dense_math.h) more times, so that what Train returns passed every
  // check; a step that never passes is an error (the worker fails rather than push it).
  // Detections are the steps recomputed, over this object's life.
  int64_t abft_detections() const override { return abft_detections_; }
  int64_t abft_cleared() const override { return abft_cleared_; }

 private:
  Dlrm* model_;
  int64_t abft_detections_ = 0;
  int64_t abft_cleared_ = 0;
  int staged_ = 0;
  std::vector<float> pooled_, d_pooled_;
};

}  // namespace ecps

#endif  // ECPS_KERNELS_CPU_DENSE_MATH_H_

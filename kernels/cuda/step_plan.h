// The host-side bookkeeping of one step that both trainers (the CUDA one and the CPU run of
// the same kernel bodies) share: tensor offsets in one flat buffer, the batch's slices, and
// per slice which samples use each unique row (the CSR that RowGradAt reads).
#ifndef ECPS_KERNELS_CUDA_STEP_PLAN_H_
#define ECPS_KERNELS_CUDA_STEP_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/abft.h"
#include "kernels/cuda/train_kernels.h"
#include "kernels/dense_math.h"

namespace ecps::gpu {

struct LayerShape {
  int in = 0, out = 0;
  bool relu = false;
  int64_t w = 0, b = 0;  // offsets of the weight and bias in the flat parameter buffer
  int tensor = 0;        // index of the weight tensor (the bias is tensor + 1)
};

inline constexpr int64_t kTensorAlign = 64;

struct ModelPlan {
  int num_dense = 0, num_sparse = 0, dim = 0, vectors = 0, pairs = 0, top_in = 0;
  int max_width = 0;  // the widest activation or gradient of any layer (per sample)
  std::vector<LayerShape> bottom, top;
  // Each tensor's place in the flat parameter (and gradient) buffer: every one starts on a
  // 256-byte boundary (kTensorAlign floats), which cuBLASLt's algorithms assume of their
  // operands and the bias.
  std::vector<int64_t> tensor_offset, tensor_size;
  int64_t params = 0;  // floats of the flat buffer, padding included (a multiple of kTensorAlign)
};

// Empty string and *plan filled, or what is wrong with the shape.
std::string MakeModelPlan(const DlrmConfig& shape, ModelPlan* plan);

// Which samples use each unique row, for samples [begin, end) of a batch: rows of all
// tables in order (table 0's first), row_table[u] their table, occ_offset (rows + 1
// entries) into occ_samples (samples relative to `begin`, ascending).
struct RowUse {
  std::vector<int64_t> row_offset;  // first unique row of each table, then the total
  std::vector<int32_t> row_table;
  std::vector<int64_t> occ_offset;
  std::vector<int32_t> occ_samples;
};

// Empty string on success; an index outside its table's unique rows is an error.
std::string MakeRowUse(const StepInput& in, int num_sparse, int begin, int end, RowUse* use);

// The first sample of slice `part` of `parts` equal slices of `n` (as ParallelRunner's).
inline int SliceBegin(int n, int parts, int part) {
  return static_cast<int>(static_cast<int64_t>(n) * part / parts);
}

// Copies the step's dense tensors into the flat buffer (plan.params floats).
void GatherParams(const ModelPlan& plan, const StepInput& in, float* flat);
// Copies flat gradients (parameters, then the unique rows of every table) to *out.
void ScatterGrads(const ModelPlan& plan, const StepInput& in, const float* flat, StepOutput* out);

// Checks a StepInput against the plan: sizes, pointers, batch within max_batch.
std::string CheckInput(const ModelPlan& plan, const StepInput& in, int max_batch, bool need_labels);

// --- ABFT (DenseMath::SetAbft) -----------------------------------------------------------

// A linear layer's three GEMMs. Their fault-injection sites number as the CPU model's
// (Dlrm::SetAbft): 3 per layer, bottom layers first, then top, the output layer last.
enum class LayerProduct { kForward = 0, kWeightGrad = 1, kInputGrad = 2 };
inline int AbftSite(const LayerShape& layer, LayerProduct product) {
  return 3 * (layer.tensor / 2) + static_cast<int>(product);
}

// Asks `injector` (may be null) about GEMM `site` before it runs: empty string and
// *flip_element the element of C to flip afterwards (-1: none) and *flip_bit, or an error for a
// fault the bodies' trainers cannot inject (only GemmFault::kOutput).
std::string AskInjector(GemmFaultInjector* injector, int site, const GemmOperands& g,
                        int64_t* flip_element, int* flip_bit);

// The largest inner dimension (k) and width (n) of any GEMM of a step of `batch` samples: what
// the checks' scratch must hold.
void AbftScratchSizes(const ModelPlan& plan, int batch, int* k_max, int* n_max);

// Train's error for a step that missed its checks 1 + kAbftRetries times in a row.
std::string AbftGiveUp(int misses);

}  // namespace ecps::gpu

#endif  // ECPS_KERNELS_CUDA_STEP_PLAN_H_

// The shape of the DLRM a checkpoint holds, read back from its dense tensors' sizes alone
// (a checkpoint stores no spec): widths of the bottom and top MLPs, the embedding tables.
#ifndef ECPS_EXPORT_DLRM_SHAPE_H_
#define ECPS_EXPORT_DLRM_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/format.h"

namespace ecps {

struct DlrmShape {
  int num_dense = 0;                // dense features (the bottom MLP's input)
  int dim = 0;                      // embedding dimension = the bottom MLP's last width
  std::vector<int64_t> table_rows;  // one table per sparse feature
  std::vector<int> bottom_mlp;      // widths of the bottom layers (ReLU after each)
  std::vector<int> top_mlp;         // widths of the top hidden layers (ReLU), then 1 (linear)
  int num_sparse() const { return static_cast<int>(table_rows.size()); }
  // The interaction's dot products: T(T+1)/2 for T tables (every pair of the T+1 vectors).
  int pairs() const { return num_sparse() * (num_sparse() + 1) / 2; }
  int top_in() const { return dim + pairs(); }
};

// A layer of an MLP as Dlrm lays its tensors out: weight (out x in, row-major), bias (out).
struct DlrmLayer {
  int in = 0, out = 0;
  bool relu = true;
  int weight = 0;  // index of the weight tensor among the dense tensors; the bias is weight + 1
};

// Every layer, bottom first, then top (the last one is the output: 1 wide, no ReLU).
std::vector<DlrmLayer> DlrmLayers(const DlrmShape& shape);

// The shape whose tensors (kernels/dlrm.h: W, b per layer, bottom first) have the layout's
// dense_sizes, with the layout's dim and table rows. The bottom MLP ends where a layer's input
// is no longer the previous layer's output. FAILED_PRECONDITION naming what does not fit
// ("dense tensor 3 (size 10) is not a bias of width ...") when the sizes are not a DLRM's.
absl::StatusOr<DlrmShape> ShapeFromLayout(const CheckpointLayout& layout);

}  // namespace ecps

#endif  // ECPS_EXPORT_DLRM_SHAPE_H_

// The DLRM's forward pass as an ONNX model (standard operators, opset 13), exactly as
// Dlrm::Forward computes it (kernels/dlrm.h):
//
//   inputs   dense        float [N, num_dense]   the features as ecps trains on them
//                                                (log(1 + max(x, 0)) already applied)
//            sparse_rows  int64 [N, num_sparse]  one row id per table (the row mapping of
//                                                the export's manifest.json)
//   outputs  logit        float [N, 1]
//            probability  float [N, 1]           sigmoid(logit)
//
//   bottom:      Gemm(transB) + Relu per layer                       -> z0 [N, dim]
//   lookup:      Gather(sparse_rows, t, axis 1), Gather(table_t, .)  -> e_t [N, dim]
//   interaction: V = Reshape(Concat(z0, e_0..e_{T-1}), [N, T+1, dim]);
//                D = MatMul(V, Transpose(V)); the dots <v_i, v_j> for i = 1..T, j = 0..i-1,
//                in that order (Gather of the flattened D) -> [N, T(T+1)/2]
//   top:         Gemm + Relu per hidden layer over Concat(z0, dots), a linear Gemm -> logit
//
// The dense weights are initializers inside the model. The embedding tables are initializers
// too, named table_TTT, [rows, dim] float, whose bytes are ONNX external data: a range of a
// file beside the model (the export's safetensors file), so ONNX Runtime or any ONNX reader
// loads the model and its tables from the export folder as they are.
#ifndef ECPS_EXPORT_ONNX_GRAPH_H_
#define ECPS_EXPORT_ONNX_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "export/dlrm_shape.h"

namespace ecps {

inline constexpr int64_t kOnnxIrVersion = 8;
inline constexpr int64_t kOnnxOpset = 13;
inline constexpr char kOnnxDenseInput[] = "dense";
inline constexpr char kOnnxRowsInput[] = "sparse_rows";
inline constexpr char kOnnxLogitOutput[] = "logit";
inline constexpr char kOnnxProbabilityOutput[] = "probability";

// Where a table's weights lie: `bytes` bytes at `offset` of the file `location` (a name
// relative to the model's folder), float32 little-endian, row-major [rows, dim].
struct ExternalTable {
  std::string location;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// The name of table t's initializer: "table_000".
std::string OnnxTableName(int table);

// The interaction's dots as flat indices into the (T+1) x (T+1) matrix of every pair's dot
// (row-major, vector 0 the bottom output): i * (T+1) + j for i = 1..T, j = 0..i-1.
std::vector<int64_t> InteractionPairIndex(int num_sparse);

// The serialized ModelProto. `dense`: the weights of every dense tensor in Dlrm's order
// (DlrmLayers' weight/bias indices); `tables`: one per table. INVALID_ARGUMENT when a dense
// tensor's size or a table's byte count disagrees with the shape.
absl::StatusOr<std::string> BuildDlrmOnnx(const DlrmShape& shape,
                                          const std::vector<std::vector<float>>& dense,
                                          const std::vector<ExternalTable>& tables);

}  // namespace ecps

#endif  // ECPS_EXPORT_ONNX_GRAPH_H_

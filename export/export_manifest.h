// manifest.json of an export (docs/model.md, "Exporting a model"): what a serving stack needs
// besides the files themselves: the model's shape, the ONNX model's inputs and outputs, where
// every table and optimizer state lies, and the mapping of raw categorical values to rows.
#ifndef ECPS_EXPORT_EXPORT_MANIFEST_H_
#define ECPS_EXPORT_EXPORT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "export/dlrm_shape.h"

namespace ecps {

inline constexpr int kExportFormatVersion = 1;
inline constexpr char kExportManifestName[] = "manifest.json";
inline constexpr char kExportOnnxName[] = "model.onnx";
inline constexpr char kExportTablesName[] = "embeddings.safetensors";
inline constexpr char kExportDenseStateName[] = "dense_optimizer_state.safetensors";

// What the export wrote, for its manifest.
struct ExportDescription {
  std::string job;  // the checkpoint's job and step (informational)
  int64_t step = 0;
  DlrmShape shape;
  std::string sparse_optimizer, dense_optimizer;
  int sparse_state_floats = 0;  // per row (payload_floats - dim)
  bool with_optimizer_state = false;
  std::vector<std::string> dense_names;  // "bottom.0.weight", ... in Dlrm's order
};

// The safetensors names of table t's weights ("table_000", also the ONNX initializer's name)
// and optimizer state ("table_000.optimizer_state").
std::string TableWeightsTensor(int table);
std::string TableStateTensor(int table);
// The safetensors name of a dense tensor's optimizer state ("bottom.0.weight.optimizer_state").
std::string DenseStateTensor(const std::string& dense_name);

// The row_mapping object's worked examples: raw values (as hex text) with their rows for the
// first and last table, computed with kernels/row_hash.h.
struct RowMappingExample {
  int table = 0;
  std::string raw_hex;
  int64_t row = 0;
};
std::vector<RowMappingExample> RowMappingExamples(const DlrmShape& shape);

// The manifest's text (JSON, indented, ends with a newline).
std::string ExportManifestJson(const ExportDescription& export_description);

}  // namespace ecps

#endif  // ECPS_EXPORT_EXPORT_MANIFEST_H_

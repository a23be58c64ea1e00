// `ecps export CHECKPOINT -o DIR`: turns a checkpoint into what a serving stack loads
// (docs/model.md, "Exporting a model"):
//
//   DIR/model.onnx                  the DLRM's forward pass (export/onnx_graph.h)
//   DIR/embeddings.safetensors      every table's weights [rows, dim] (the ONNX model's
//                                   external data); with optimizer state also
//                                   table_TTT.optimizer_state [rows, state floats]
//   DIR/dense_optimizer_state.safetensors   with optimizer state only: the dense tensors'
//   DIR/manifest.json               shape, files, inputs and outputs, the row mapping
#ifndef ECPS_EXPORT_EXPORTER_H_
#define ECPS_EXPORT_EXPORTER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ecps {

struct ExportOptions {
  bool with_optimizer_state = false;
};

struct ExportSummary {
  std::string checkpoint_dir;  // the checkpoint exported (CHECKPOINT or its newest)
  int64_t step = 0;
  int64_t bytes = 0;  // written, all files together
};

// Exports the checkpoint `checkpoint` names (a checkpoint directory, or a root whose newest
// committed checkpoint is taken: checkpoint/layout.h, ResolveCheckpointDir) into `out_dir`.
// Every file of the checkpoint is verified first (sizes and checksums). The files are written
// into OUT_DIR.partial and renamed to OUT_DIR at the end, so OUT_DIR is complete or absent.
// Errors: NOT_FOUND for a missing checkpoint or manifest; DATA_LOSS naming the damaged file;
// FAILED_PRECONDITION when OUT_DIR exists and is not empty, or the dense tensors are not a
// DLRM's; INTERNAL for I/O failures (naming the file).
absl::StatusOr<ExportSummary> ExportCheckpoint(const std::string& checkpoint,
                                               const std::string& out_dir,
                                               const ExportOptions& options);

}  // namespace ecps

#endif  // ECPS_EXPORT_EXPORTER_H_

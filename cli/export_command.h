// `ecps export CHECKPOINT -o DIR [--with-optimizer-state]`: a checkpoint as a serving stack
// loads it: the DLRM as ONNX, the tables as safetensors, manifest.json (export/exporter.h,
// docs/model.md "Exporting a model").
#ifndef ECPS_CLI_EXPORT_COMMAND_H_
#define ECPS_CLI_EXPORT_COMMAND_H_

#include <string>

namespace ecps {

// Prints the folder written, the checkpoint and step exported and the bytes written. Exit
// code: 0 exported; 1 the export failed (a missing or damaged checkpoint, an output folder
// that is not empty, an I/O error: one line on stderr naming the file).
int RunExportCommand(const std::string& checkpoint, const std::string& out_dir,
                     bool with_optimizer_state);

}  // namespace ecps

#endif  // ECPS_CLI_EXPORT_COMMAND_H_

#include "cli/export_command.h"

#include <cstdio>

#include "export/exporter.h"

namespace ecps {

int RunExportCommand(const std::string& checkpoint, const std::string& out_dir,
                     bool with_optimizer_state) {
  ExportOptions options;
  options.with_optimizer_state = with_optimizer_state;
  absl::StatusOr<ExportSummary> summary = ExportCheckpoint(checkpoint, out_dir, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "ecps export: %s\n", std::string(summary.status().message()).c_str());
    return 1;
  }
  std::printf(
      "exported             %s\ncheckpoint           %s\nstep                 %lld\n"
      "bytes                %lld\n",
      out_dir.c_str(), summary->checkpoint_dir.c_str(), static_cast<long long>(summary->step),
      static_cast<long long>(summary->bytes));
  return 0;
}

}  // namespace ecps

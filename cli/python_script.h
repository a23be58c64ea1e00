// Runs the project's Python helpers (deploy/*.py: plots and reports, with Debian's
// python3-matplotlib) from the binary.
#ifndef ECPS_CLI_PYTHON_SCRIPT_H_
#define ECPS_CLI_PYTHON_SCRIPT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ecps {

// Runs deploy/`script` (found next to the source tree this binary was built from, next to
// the binary, in ./deploy, or at $ECPS_SCRIPTS_DIR/`script`) with `args`, output to `log`.
// Uses $ECPS_PYTHON, else /usr/bin/python3 (where Debian's matplotlib is), else python3.
// NOT_FOUND when the script is missing; INTERNAL with the log's last line when it fails.
absl::Status RunPythonScript(const std::string& script, const std::vector<std::string>& args,
                             const std::string& log);

}  // namespace ecps

#endif  // ECPS_CLI_PYTHON_SCRIPT_H_

// `ecps scrub ADDR`: asks a running job's coordinator to check every stripe's parity against
// a fresh encode of its data, and every dense replica against its primary, at a consistent
// point (updates pause for the scrub's duration).
#ifndef ECPS_CLI_SCRUB_COMMAND_H_
#define ECPS_CLI_SCRUB_COMMAND_H_

#include <string>

namespace ecps {

// Prints the report. Exit code: 0 clean, 1 any mismatch or a failed or refused scrub, 2
// coordinator unreachable (the line on stderr says how, cli/operator_call.h), 3 token refused.
int RunScrubCommand(const std::string& address, const std::string& token);

}  // namespace ecps

#endif  // ECPS_CLI_SCRUB_COMMAND_H_

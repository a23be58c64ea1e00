// `ecps checkpoint ADDR`: asks a running job's coordinator to save a checkpoint now (every
// server writes its rows in parallel while training pauses) under the job's
// fault_tolerance.checkpoint.dir.
#ifndef ECPS_CLI_CHECKPOINT_COMMAND_H_
#define ECPS_CLI_CHECKPOINT_COMMAND_H_

#include <string>

namespace ecps {

// Prints the committed directory, step and reader positions. Exit code: 0 saved, 1 the save
// failed or was refused, 2 coordinator unreachable (cannot connect, connection lost mid-call,
// TLS mismatch, no answer: the line on stderr says which, cli/operator_call.h), 3 token
// refused.
int RunCheckpointCommand(const std::string& address, const std::string& token);

}  // namespace ecps

#endif  // ECPS_CLI_CHECKPOINT_COMMAND_H_

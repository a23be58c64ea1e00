// `ecps kill ADDR server|worker N`: an admin drill. Asks the coordinator (Kill RPC, job token
// required) to make the node holding that logical id kill itself (SIGKILL) at its next
// heartbeat; the failure is then detected and recovered like any crash.
#ifndef ECPS_CLI_KILL_COMMAND_H_
#define ECPS_CLI_KILL_COMMAND_H_

#include <string>

namespace ecps {

// Exit codes: those of every operator command (kStatusOk, kStatusError, kStatusUnreachable,
// kStatusBadToken in cli/operator_exit_codes.h). kStatusError also covers a bad role or id and a
// node with no live instance; the reason is printed on stderr as one line, which names the
// kind of failure (cli/operator_call.h). On success prints
// "kill requested: server 2 (instance ..., pid N)".
int RunKillCommand(const std::string& address, const std::string& token, const std::string& role,
                   const std::string& id);

}  // namespace ecps

#endif  // ECPS_CLI_KILL_COMMAND_H_

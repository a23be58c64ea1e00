// `ecps status ADDR`: asks a coordinator for the job's status and prints it.
#ifndef ECPS_CLI_STATUS_COMMAND_H_
#define ECPS_CLI_STATUS_COMMAND_H_

#include <string>

#include "cli/operator_exit_codes.h"

namespace ecps {
namespace v1 {
class StatusResponse;
}

// Calls Status on the coordinator at `address` (host:port) with `token` and prints the
// result to stdout: a table (FormatStatusTable) or, with `json`, the StatusResponse as JSON.
// With `watch`, reprints every `watch_interval_ms` until the job is FINISHED or FAILED (or
// the process is interrupted). A failure goes to stderr as one line that names its kind
// (cli/operator_call.h). Returns kStatusOk, or the failure's exit code (kStatusUnreachable,
// kStatusBadToken, kStatusError).
int RunStatusCommand(const std::string& address, const std::string& token, bool json, bool watch,
                     int watch_interval_ms = 1000);

// Renders a status as human-readable text: one job line (phase, step/total, samples/s,
// loss, AUC, elapsed, ETA, epoch, mode k/r), an error line when the job failed, then a
// table with one row per node (role, id, address, state, heartbeat age, pid, and rows/bytes
// for servers, with rebuild progress for a RECOVERING one, or step and samples/s for workers),
// then one line per failure of the job (what died, detection, replacement, recovery). Pure.
std::string FormatStatusTable(const v1::StatusResponse& status);

// The status as pretty-printed JSON (proto field names, defaults included).
std::string FormatStatusJson(const v1::StatusResponse& status);

}  // namespace ecps

#endif  // ECPS_CLI_STATUS_COMMAND_H_

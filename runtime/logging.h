// Logging setup for every ecps process (spdlog).
//
// Each process calls InitLogging once at start with its role name ("coordinator",
// "server-2", ...). Lines go to stderr as "[time] [role] [level] message". Log one line per
// event an operator cares about; nothing per row or per request on the hot path.
#ifndef ECPS_RUNTIME_LOGGING_H_
#define ECPS_RUNTIME_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace ecps {

// Sets the default logger's name and level. `level` is one of trace, debug, info, warn,
// error, off; an unknown level returns INVALID_ARGUMENT and leaves the logger unchanged.
absl::Status InitLogging(const std::string& role, const std::string& level = "info");

}  // namespace ecps

#endif  // ECPS_RUNTIME_LOGGING_H_

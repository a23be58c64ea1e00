// What `ecps run` checks before it starts anything, beyond the spec's own check (which knows
// nothing of the machine): that every folder the job writes into can be written, and, when
// every role runs on this machine, that the servers' tables fit its memory. A job that would
// fail seconds after its start fails here instead, with the figures, and nothing runs.
#ifndef ECPS_CLI_PREFLIGHT_H_
#define ECPS_CLI_PREFLIGHT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "runtime/spec.h"

namespace ecps {

// Whether `dir` (which `key` names, for the message) can be created and a file written in
// it: INVALID_ARGUMENT naming the key, the folder and the system's reason otherwise. Leaves
// nothing behind that was not there before.
absl::Status CheckWritableFolder(const std::string& key, const std::string& dir);

// Whether the tables of the job's servers, all on this machine, fit `available_bytes`
// (MemAvailable; negative: unknown, and then nothing is refused). RESOURCE_EXHAUSTED with
// the figures and what to change otherwise. Spares allocate only when they take a dead
// server's place, whose memory is then free, so they are not counted.
absl::Status CheckTablesFitThisMachine(const JobSpec& spec, int64_t available_bytes);

}  // namespace ecps

#endif  // ECPS_CLI_PREFLIGHT_H_

// What `ecps run` leaves in a job's output folder for the operator commands: the job token
// (file `token`, mode 0600: it is the job's only credential) and the coordinator's address
// (file `coordinator.address`, host:port). `ecps status|scrub|kill|checkpoint --job DIR`
// read both, so the hint `ecps run` prints works as it is.
#ifndef ECPS_CLI_JOB_DIR_H_
#define ECPS_CLI_JOB_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/security.h"

namespace ecps {

struct JobHandle {
  std::string address;  // empty when only the token was written (before the coordinator listens)
  std::string token;    // the admin token (docs/security.md)
  TlsFiles tls;         // the admin's TLS files (file `tls`); empty without TLS
};

// Writes DIR/token with mode 0600 (created so: never readable by others, not even briefly),
// replacing one left by an earlier run.
absl::Status WriteJobToken(const std::string& dir, const std::string& token);
// Writes DIR/tls: the admin's TLS files, one path a line (ca, cert, key), for --job DIR.
absl::Status WriteJobTls(const std::string& dir, const TlsFiles& tls);
// Writes DIR/coordinator.address.
absl::Status WriteJobAddress(const std::string& dir, const std::string& address);

// Reads both files of DIR. NOT_FOUND naming the file when DIR holds no job; a token file
// that others may read is refused (PERMISSION_DENIED), as ssh refuses a key that is.
absl::StatusOr<JobHandle> ReadJobDir(const std::string& dir);

}  // namespace ecps

#endif  // ECPS_CLI_JOB_DIR_H_

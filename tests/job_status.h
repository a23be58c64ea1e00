// `ecps status --job DIR --json` of a running job, run as a user runs it (the job folder's
// token and address) and parsed: for end-to-end tests that watch a job (ECPS_BINARY).
#ifndef ECPS_TESTS_JOB_STATUS_H_
#define ECPS_TESTS_JOB_STATUS_H_

#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "google/protobuf/util/json_util.h"
#include "proto/ecps.pb.h"
#include "tests/ecps_process.h"

namespace ecps {
namespace testing_process {

// The job's status; nullopt while it does not answer. `scratch` is a folder for the output.
inline std::optional<v1::StatusResponse> JobStatus(const fs::path& scratch, const fs::path& job) {
  const fs::path out = scratch / "status.json";
  pid_t pid = Start({"status", "--job", job.string(), "--json"}, out);
  const int status = WaitFor(pid, std::chrono::seconds(20));
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  // The file holds stderr too (a warning may come before the JSON).
  const std::string text = ReadFile(out);
  const size_t start = text.find('{');
  if (start == std::string::npos) return std::nullopt;
  v1::StatusResponse response;
  if (!google::protobuf::util::JsonStringToMessage(text.substr(start), &response).ok()) {
    return std::nullopt;
  }
  return response;
}

}  // namespace testing_process
}  // namespace ecps

#endif  // ECPS_TESTS_JOB_STATUS_H_

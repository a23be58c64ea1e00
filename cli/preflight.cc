#include "cli/preflight.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ps/server_parts.h"

namespace ecps {

namespace fs = std::filesystem;

absl::Status CheckWritableFolder(const std::string& key, const std::string& dir) {
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", dir, " is not writable: ", why));
  };
  std::error_code ec;
  const fs::path path = fs::absolute(dir, ec);
  if (ec) return refuse(ec.message());
  // The folders this check makes, deepest first, removed again at the end.
  std::vector<fs::path> made;
  fs::path existing = path;
  while (!existing.empty() && !fs::exists(existing, ec)) {
    made.push_back(existing);
    if (existing == existing.parent_path()) break;
    existing = existing.parent_path();
  }
  auto clean_up = [&made] {
    std::error_code ignored;
    for (const fs::path& p : made) fs::remove(p, ignored);
  };
  if (!fs::is_directory(existing, ec)) {
    return refuse(absl::StrCat(existing.string(), " is not a folder"));
  }
  if (!made.empty() && (fs::create_directories(path, ec), ec)) {
    const std::string why = absl::StrCat("cannot create it (", ec.message(), ")");
    clean_up();
    return refuse(why);
  }
  // A file of our own, as the job's writers will make (root passes access(2) checks that
  // its writes then fail, on /proc for one).
  const fs::path probe = path / absl::StrCat(".ecps-write-check-", ::getpid());
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    const std::string why = absl::StrCat("cannot create a file in it (", std::strerror(errno), ")");
    clean_up();
    return refuse(why);
  }
  const bool wrote = ::write(fd, "x", 1) == 1;
  const int write_errno = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  clean_up();
  if (!wrote) {
    return refuse(absl::StrCat("cannot write a file in it (", std::strerror(write_errno), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckTablesFitThisMachine(const JobSpec& spec, int64_t available_bytes) {
  if (available_bytes < 0) return absl::OkStatus();
  const int64_t per_server = ServerTableBytes(spec, 0);
  const int64_t need = per_server * spec.cluster.servers;
  if (need <= available_bytes) return absl::OkStatus();
  constexpr double kGiB = 1 << 30;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the servers' tables do not fit this machine: %d servers x %.2f GiB (embedding rows, "
      "their optimizer state and parity) = %.2f GiB, and it has %.2f GiB available "
      "(MemAvailable); make model.table_rows or model.embedding_dim smaller, or run on "
      "several hosts (ecps slurm, ecps k8s, or single roles: docs/deploy.md)",
      spec.cluster.servers, per_server / kGiB, need / kGiB, available_bytes / kGiB));
}

}  // namespace ecps

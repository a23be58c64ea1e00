#include "cli/job_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ecps {
namespace {

std::string TokenPath(const std::string& dir) { return dir + "/token"; }
std::string AddressPath(const std::string& dir) { return dir + "/coordinator.address"; }

absl::Status WriteWhole(const std::string& path, const std::string& text, mode_t mode) {
  // Removed first: an existing file keeps its mode through O_TRUNC, and could be a link.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::PermissionDeniedError(absl::StrCat("cannot replace ", path, ": ",
                                                    std::strerror(errno)));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", path, ": ",
                                                    std::strerror(errno)));
  }
  const std::string line = text + "\n";
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadLine(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no ", path));
  std::stringstream text;
  text << in.rdbuf();
  std::string line = std::string(absl::StripAsciiWhitespace(text.str()));
  if (line.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return line;
}

}  // namespace

absl::Status WriteJobToken(const std::string& dir, const std::string& token) {
  return WriteWhole(TokenPath(dir), token, 0600);
}

absl::Status WriteJobTls(const std::string& dir, const TlsFiles& tls) {
  return WriteWhole(dir + "/tls", absl::StrCat(tls.ca, "\n", tls.cert, "\n", tls.key, "\n"),
                    0644);
}

absl::Status WriteJobAddress(const std::string& dir, const std::string& address) {
  return WriteWhole(AddressPath(dir), address, 0644);
}

absl::StatusOr<JobHandle> ReadJobDir(const std::string& dir) {
  JobHandle job;
  const std::string token_path = TokenPath(dir);
  struct stat st;
  if (::stat(token_path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "no job token in ", dir, " (", token_path, ": ", std::strerror(errno),
        "); is it the output folder of `ecps run`?"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s is readable by others (mode %o); it is the job's credential: chmod 600 it",
        token_path, st.st_mode & 0777));
  }
  absl::StatusOr<std::string> token = ReadLine(token_path);
  if (!token.ok()) return token.status();
  job.token = *token;
  absl::StatusOr<std::string> address = ReadLine(AddressPath(dir));
  if (address.ok()) job.address = *address;
  std::ifstream tls(dir + "/tls");
  std::getline(tls, job.tls.ca) && std::getline(tls, job.tls.cert) &&
      std::getline(tls, job.tls.key);
  return job;
}

}  // namespace ecps

#include "runtime/coordinator_finder.h"

#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "runtime/net.h"

namespace ecps {
namespace {

absl::StatusOr<std::string> ReadFileFirstLine(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(path + ": cannot open");
  std::string line;
  if (!std::getline(f, line)) return absl::NotFoundError(path + ": empty");
  return line;
}

}  // namespace

CoordinatorFinder::CoordinatorFinder(std::string address, std::string address_file,
                                     ReadFirstLine read)
    : address_(std::move(address)),
      address_file_(std::move(address_file)),
      read_(read ? std::move(read) : ReadFirstLine(ReadFileFirstLine)) {}

std::optional<std::string> CoordinatorFinder::Refresh() {
  if (address_file_.empty()) return std::nullopt;
  absl::StatusOr<std::string> line = read_(address_file_);
  if (!line.ok()) return std::nullopt;
  const std::string found(absl::StripAsciiWhitespace(*line));
  // A file caught half written (the coordinator replaces it by a rename, but a shared
  // filesystem may show anything) is not an address: keep the current one.
  if (found == address_ || !CheckDialAddress(found).ok()) return std::nullopt;
  address_ = found;
  return found;
}

}  // namespace ecps

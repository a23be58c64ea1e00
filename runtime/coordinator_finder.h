// Where a server or worker finds its coordinator, and finds it again after it moved
// (docs/recovery.md, "A coordinator that moves"). A role starts with the address it was given
// (--coordinator, $ECPS_COORDINATOR, cluster.coordinator). With an address file as well
// (--coordinator-file: the file the coordinator writes with --address-file, on a folder every
// node sees) the role reads that file again whenever the coordinator stops answering, so a
// coordinator relaunched on another node, with another address, is found. A DNS name needs
// nothing of this: gRPC resolves the name again when its connection fails.
//
// Thread-compatible; CoordinatorClient calls it under its own lock. The file is read through
// `read`, a seam for tests.
#ifndef ECPS_RUNTIME_COORDINATOR_FINDER_H_
#define ECPS_RUNTIME_COORDINATOR_FINDER_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ecps {

class CoordinatorFinder {
 public:
  // The file's first line; NOT_FOUND when there is no file.
  using ReadFirstLine = std::function<absl::StatusOr<std::string>(const std::string& path)>;

  // `address`: where to start. `address_file`: empty for none. `read`: null for the real file.
  CoordinatorFinder(std::string address, std::string address_file, ReadFirstLine read = nullptr);

  const std::string& address() const { return address_; }
  const std::string& address_file() const { return address_file_; }

  // Reads the address file again. Returns the address it names when that is a valid dial
  // address (runtime/net.h) other than the current one, which it then becomes; nullopt
  // otherwise: no file configured, none there (a relaunched coordinator writes it once it
  // listens), unreadable, not an address, or the same address.
  std::optional<std::string> Refresh();

 private:
  std::string address_;
  const std::string address_file_;
  const ReadFirstLine read_;
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_COORDINATOR_FINDER_H_

// Freezes every parameter server for a cluster-wide consistent point (scrub, checkpoint):
// each server stops taking updates, lets the ones in flight finish and drains its parity
// delta streams. Resume() (or the destructor) resumes exactly the servers it froze.
// Not thread-safe.
#ifndef ECPS_COORDINATOR_FROZEN_SERVERS_H_
#define ECPS_COORDINATOR_FROZEN_SERVERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {

class FrozenServers {
 public:

  // Freezes the servers in order; stops at the first that cannot be frozen (see error()).
  FrozenServers(const std::vector<std::unique_ptr<v1::ParameterServer::Stub>>& stubs,
                std::string token, CoordinatorStamp stamp, std::string sender, RpcOptions options);
  ~FrozenServers() { Resume().IgnoreError(); }
  FrozenServers(const FrozenServers&) = delete;
  FrozenServers& operator=(const FrozenServers&) = delete;

  // Empty when every server is frozen; else which one failed and why.
  const std::string& error() const { return error_; }
  // Resumes every server frozen so far (once); returns the first failure.
  absl::Status Resume();

 private:
  absl::Status Freeze(size_t server, bool on);

  const std::vector<std::unique_ptr<v1::ParameterServer::Stub>>& stubs_;
  const std::string token_;
  const CoordinatorStamp stamp_;
  const std::string sender_;
  const RpcOptions options_;
  const uint64_t freeze_id_;  // one lease id on every server, owned by "coordinator"
  size_t frozen_ = 0;  // servers [0, frozen_) are frozen
  std::string error_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_FROZEN_SERVERS_H_

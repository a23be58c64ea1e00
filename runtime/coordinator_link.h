// What a server or worker process needs of the coordinator, as an interface: the seam that
// lets a unit test drive a role's lifecycle steps (ps/server_lifecycle.h,
// worker/worker_lifecycle.h) against a fake instead of a gRPC coordinator.
// CoordinatorClient (runtime/coordinator_client.h) is the production implementation; see it
// for each call's contract.
#ifndef ECPS_RUNTIME_COORDINATOR_LINK_H_
#define ECPS_RUNTIME_COORDINATOR_LINK_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/ecps.pb.h"

namespace ecps {

class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;

  // Registers (retrying while the coordinator does not answer, for up to `wait_ms`).
  virtual absl::StatusOr<v1::RegisterResponse> Register(v1::Role role, const std::string& address,
                                                        int requested_id,
                                                        const std::string& instance,
                                                        int wait_ms) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) = 0;
  // Reports server `id` unreachable at `address` (rate-limited; errors ignored).
  virtual void ReportServerUnreachable(int id, const std::string& reason,
                                       const std::string& address) = 0;
  // The latest cluster map seen (epoch 0 before the first).
  virtual v1::ClusterMap map() const = 0;
  // Waits until `ready(map)` holds or `timeout_ms` passes; returns the map that satisfied it.
  virtual absl::StatusOr<v1::ClusterMap> WaitForMap(
      const std::function<bool(const v1::ClusterMap&)>& ready, int timeout_ms) = 0;
  // The epoch of the latest map seen.
  virtual uint64_t epoch() const = 0;
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_COORDINATOR_LINK_H_

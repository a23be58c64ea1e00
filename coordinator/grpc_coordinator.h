// GrpcCoordinator: adapts CoordinatorService to the gRPC service ecps.v1.Coordinator.
//
// It holds no logic: every RPC calls the matching CoordinatorService method and translates
// its absl::Status (ToGrpcStatus). WatchClusterMap streams the service's maps to the client
// and ends when the client cancels or CoordinatorService::Shutdown() is called; so, to stop:
// service->Shutdown(), then shut the grpc::Server down, then destroy this object.
#ifndef ECPS_COORDINATOR_GRPC_COORDINATOR_H_
#define ECPS_COORDINATOR_GRPC_COORDINATOR_H_

#include <memory>

namespace grpc {
class Service;
}

namespace ecps {

class CoordinatorService;

class GrpcCoordinator {
 public:
  // `service` must outlive this object.
  explicit GrpcCoordinator(CoordinatorService* service);
  ~GrpcCoordinator();
  GrpcCoordinator(const GrpcCoordinator&) = delete;
  GrpcCoordinator& operator=(const GrpcCoordinator&) = delete;

  // The gRPC service to register with a server (e.g. StartGrpcServer). Owned by this object.
  grpc::Service* grpc_service();

 private:
  class Impl;  // derives from the generated ecps::v1::Coordinator::Service
  std::unique_ptr<Impl> impl_;
};

}  // namespace ecps

#endif  // ECPS_COORDINATOR_GRPC_COORDINATOR_H_

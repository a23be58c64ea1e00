#include "coordinator/grpc_coordinator.h"

#include "coordinator/coordinator_service.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {

class GrpcCoordinator::Impl final : public v1::Coordinator::Service {
 public:
  explicit Impl(CoordinatorService* service) : service_(service) {}

  grpc::Status Register(grpc::ServerContext* /*context*/, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override {
    return ToGrpcStatus(service_->Register(*request, response));
  }

  grpc::Status Heartbeat(grpc::ServerContext* /*context*/, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    return ToGrpcStatus(service_->Heartbeat(*request, response));
  }

  grpc::Status WatchClusterMap(grpc::ServerContext* context,
                               const v1::WatchClusterMapRequest* request,
                               grpc::ServerWriter<v1::ClusterMap>* writer) override {
    return ToGrpcStatus(service_->WatchClusterMap(
        *request, [context] { return context->IsCancelled(); },
        [writer](const v1::ClusterMap& map) { return writer->Write(map); }));
  }

  grpc::Status ReportFailure(grpc::ServerContext* /*context*/,
                             const v1::ReportFailureRequest* request,
                             v1::ReportFailureResponse* response) override {
    return ToGrpcStatus(service_->ReportFailure(*request, response));
  }

  grpc::Status Scrub(grpc::ServerContext* /*context*/, const v1::ScrubRequest* request,
                     v1::ScrubReport* report) override {
    return ToGrpcStatus(service_->Scrub(*request, report));
  }

  grpc::Status Kill(grpc::ServerContext* /*context*/, const v1::KillRequest* request,
                    v1::KillResponse* response) override {
    return ToGrpcStatus(service_->Kill(*request, response));
  }

  grpc::Status Checkpoint(grpc::ServerContext* /*context*/, const v1::CheckpointRequest* request,
                          v1::CheckpointReport* response) override {
    return ToGrpcStatus(service_->Checkpoint(*request, response));
  }

  grpc::Status Status(grpc::ServerContext* /*context*/, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override {
    return ToGrpcStatus(service_->Status(*request, response));
  }

 private:
  CoordinatorService* const service_;
};

GrpcCoordinator::GrpcCoordinator(CoordinatorService* service)
    : impl_(std::make_unique<Impl>(service)) {}

GrpcCoordinator::~GrpcCoordinator() = default;

grpc::Service* GrpcCoordinator::grpc_service() { return impl_.get(); }

}  // namespace ecps

#include "coordinator/grpc_coordinator.h"

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_service.h"
#include "proto/ecps.grpc.pb.h"
#include "proto/ecps.pb.h"
#include "runtime/access_policy.h"
#include "runtime/rpc.h"
#include "runtime/security.h"

namespace ecps {

class GrpcCoordinator::Impl final : public v1::Coordinator::Service {
 public:
  explicit Impl(CoordinatorService* service) : service_(service) {}

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override {
    return ServeNode(context, request->header(), "Register", request->role(),
                     [&] { return service_->Register(*request, response); });
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    return ServeNode(context, request->header(), "Heartbeat", request->role(),
                     [&] { return service_->Heartbeat(*request, response); });
  }

  grpc::Status WatchClusterMap(grpc::ServerContext* context,
                               const v1::WatchClusterMapRequest* request,
                               grpc::ServerWriter<v1::ClusterMap>* writer) override {
    return Serve(context, request->header(), "WatchClusterMap", [&] {
      return service_->WatchClusterMap(
          *request, [context] { return context->IsCancelled(); },
          [writer](const v1::ClusterMap& map) { return writer->Write(map); });
    });
  }

  grpc::Status ReportFailure(grpc::ServerContext* context, const v1::ReportFailureRequest* request,
                             v1::ReportFailureResponse* response) override {
    return Serve(context, request->header(), "ReportFailure",
                 [&] { return service_->ReportFailure(*request, response); });
  }

  grpc::Status Scrub(grpc::ServerContext* context, const v1::ScrubRequest* request,
                     v1::ScrubReport* report) override {
    return Serve(context, request->header(), "Scrub",
                 [&] { return service_->Scrub(*request, report); });
  }

  grpc::Status Kill(grpc::ServerContext* context, const v1::KillRequest* request,
                    v1::KillResponse* response) override {
    return Serve(context, request->header(), "Kill",
                 [&] { return service_->Kill(*request, response); });
  }

  grpc::Status Checkpoint(grpc::ServerContext* context, const v1::CheckpointRequest* request,
                          v1::CheckpointReport* response) override {
    return Serve(context, request->header(), "Checkpoint",
                 [&] { return service_->Checkpoint(*request, response); });
  }

  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override {
    return Serve(context, request->header(), "Status",
                 [&] { return service_->Status(*request, response); });
  }

 private:
  // Refuses a caller whose role may not call `method`, before the handler runs.
  template <typename Call>
  grpc::Status Serve(const grpc::ServerContext* context, const v1::RequestHeader& header,
                     std::string_view method, Call call) {
    return ServeNode(context, header, method, v1::ROLE_UNSPECIFIED, std::move(call));
  }
  // The same for a node's own calls (Register, Heartbeat), which also need the caller's role
  // to be the `node_role` the request claims: a worker's credential cannot join as a server.
  template <typename Call>
  grpc::Status ServeNode(const grpc::ServerContext* context, const v1::RequestHeader& header,
                         std::string_view method, v1::Role node_role, Call call) {
    absl::StatusOr<Caller> caller = service_->gatekeeper().Authorize(
        context, header, AccessOf(kCoordinatorAccess, method), method);
    if (!caller.ok()) return ToGrpcStatus(caller.status());
    if (node_role != v1::ROLE_UNSPECIFIED && !caller->Is(NodeRole(node_role))) {
      return ToGrpcStatus(absl::PermissionDeniedError(absl::StrCat(
          std::string(method), " as a ", v1::Role_Name(node_role),
          " needs that role's credential; the caller is ", RoleWithArticle(caller->role))));
    }
    return ToGrpcStatus(call());
  }

  // The caller role a node of `role` has (spares are servers).
  static Role NodeRole(v1::Role role) {
    return role == v1::ROLE_WORKER   ? Role::kWorker
           : role == v1::ROLE_SERVER ? Role::kServer
                                     : Role::kCoordinator;
  }

  CoordinatorService* const service_;
};

GrpcCoordinator::GrpcCoordinator(CoordinatorService* service)
    : impl_(std::make_unique<Impl>(service)) {}

GrpcCoordinator::~GrpcCoordinator() = default;

grpc::Service* GrpcCoordinator::grpc_service() { return impl_.get(); }

}  // namespace ecps

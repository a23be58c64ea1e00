// gRPC glue for the parameter server: admits each call by the caller's role
// (runtime/access_policy.h) and adapts ParameterServerCore to the generated service, nothing
// else (the logic and its validation live in parameter_server.h).
#ifndef ECPS_PS_GRPC_PARAMETER_SERVER_H_
#define ECPS_PS_GRPC_PARAMETER_SERVER_H_

#include "proto/ecps.grpc.pb.h"
#include "ps/parameter_server.h"
#include "runtime/access_policy.h"
#include "runtime/rpc.h"

namespace ecps {

class GrpcParameterServer final : public v1::ParameterServer::Service {
 public:
  explicit GrpcParameterServer(ParameterServerCore* core) : core_(core) {}
  grpc::Status Pull(grpc::ServerContext* ctx, const v1::PullRequest* req,
                    v1::PullResponse* resp) override {
    return Serve(ctx, req->header(), "Pull", [&] { return core_->Pull(*req, resp); });
  }
  grpc::Status Push(grpc::ServerContext* ctx, const v1::PushRequest* req,
                    v1::PushResponse*) override {
    return Serve(ctx, req->header(), "Push", [&] { return core_->Push(*req); });
  }
  grpc::Status PullDense(grpc::ServerContext* ctx, const v1::PullDenseRequest* req,
                         v1::PullDenseResponse* resp) override {
    return Serve(ctx, req->header(), "PullDense", [&] { return core_->PullDense(*req, resp); });
  }
  grpc::Status PushDense(grpc::ServerContext* ctx, const v1::PushDenseRequest* req,
                         v1::PushDenseResponse*) override {
    return Serve(ctx, req->header(), "PushDense", [&] { return core_->PushDense(*req); });
  }
  grpc::Status ReadRows(grpc::ServerContext* ctx, const v1::ReadRowsRequest* req,
                        v1::ReadRowsResponse* resp) override {
    return Serve(ctx, req->header(), "ReadRows", [&] { return core_->ReadRows(*req, resp); });
  }
  grpc::Status Health(grpc::ServerContext* ctx, const v1::HealthRequest* req,
                      v1::HealthResponse* resp) override {
    return Serve(ctx, req->header(), "Health", [&] { return core_->Health(req->header(), resp); });
  }
  grpc::Status ApplyParityDeltas(grpc::ServerContext* ctx, const v1::ParityDeltaBatch* req,
                                 v1::ParityDeltaAck* resp) override {
    return Serve(ctx, req->header(), "ApplyParityDeltas",
                 [&] { return core_->ApplyParityDeltas(*req, resp); });
  }
  grpc::Status ReplicateDense(grpc::ServerContext* ctx, const v1::ReplicateDenseRequest* req,
                              v1::ReplicateDenseResponse*) override {
    return Serve(ctx, req->header(), "ReplicateDense", [&] { return core_->ReplicateDense(*req); });
  }
  grpc::Status Freeze(grpc::ServerContext* ctx, const v1::FreezeRequest* req,
                      v1::FreezeResponse*) override {
    return Serve(ctx, req->header(), "Freeze", [&] { return core_->Freeze(*req); });
  }
  grpc::Status ScrubParity(grpc::ServerContext* ctx, const v1::ScrubParityRequest* req,
                           v1::ScrubParityResponse* resp) override {
    return Serve(ctx, req->header(), "ScrubParity", [&] { return core_->ScrubParity(*req, resp); });
  }
  grpc::Status HotRows(grpc::ServerContext* ctx, const v1::HotRowsRequest* req,
                       v1::HotRowsResponse* resp) override {
    return Serve(ctx, req->header(), "HotRows", [&] { return core_->HotRows(*req, resp); });
  }
  grpc::Status ReadParity(grpc::ServerContext* ctx, const v1::ReadParityRequest* req,
                          v1::ReadParityResponse* resp) override {
    return Serve(ctx, req->header(), "ReadParity", [&] { return core_->ReadParity(*req, resp); });
  }
  grpc::Status WriteParity(grpc::ServerContext* ctx, const v1::WriteParityRequest* req,
                           v1::WriteParityResponse*) override {
    return Serve(ctx, req->header(), "WriteParity", [&] { return core_->WriteParity(*req); });
  }
  grpc::Status ReadDense(grpc::ServerContext* ctx, const v1::ReadDenseRequest* req,
                         v1::ReadDenseResponse* resp) override {
    return Serve(ctx, req->header(), "ReadDense", [&] { return core_->ReadDense(*req, resp); });
  }
  grpc::Status SaveCheckpoint(grpc::ServerContext* ctx, const v1::SaveCheckpointRequest* req,
                              v1::SaveCheckpointResponse* resp) override {
    return Serve(ctx, req->header(), "SaveCheckpoint",
                 [&] { return core_->SaveCheckpoint(*req, resp); });
  }
  grpc::Status WriteRows(grpc::ServerContext* ctx, const v1::WriteRowsRequest* req,
                         v1::WriteRowsResponse*) override {
    return Serve(ctx, req->header(), "WriteRows", [&] { return core_->WriteRows(*req); });
  }
  grpc::Status InjectFault(grpc::ServerContext* ctx, const v1::InjectFaultRequest* req,
                           v1::InjectFaultResponse*) override {
    return Serve(ctx, req->header(), "InjectFault", [&] { return core_->InjectFault(*req); });
  }
  grpc::Status LoadCheckpoint(grpc::ServerContext* ctx, const v1::LoadCheckpointRequest* req,
                              v1::LoadCheckpointResponse*) override {
    return Serve(ctx, req->header(), "LoadCheckpoint", [&] { return core_->LoadCheckpoint(*req); });
  }
  grpc::Status DenseChecksums(grpc::ServerContext* ctx, const v1::DenseChecksumsRequest* req,
                              v1::DenseChecksumsResponse* resp) override {
    return Serve(ctx, req->header(), "DenseChecksums",
                 [&] { return core_->DenseChecksums(*req, resp); });
  }

 private:
  // Refuses a caller whose role may not call `method`, before the handler runs.
  template <typename Call>
  grpc::Status Serve(const grpc::ServerContext* ctx, const v1::RequestHeader& header,
                     std::string_view method, Call call) {
    absl::Status admitted =
        core_->Admit(ctx, header, AccessOf(kParameterServerAccess, method), method);
    return ToGrpcStatus(admitted.ok() ? call() : admitted);
  }

  ParameterServerCore* core_;
};

}  // namespace ecps

#endif  // ECPS_PS_GRPC_PARAMETER_SERVER_H_

// gRPC glue for the parameter server: adapts ParameterServerCore to the generated service,
// nothing else (the logic and its validation live in parameter_server.h).
#ifndef ECPS_PS_GRPC_PARAMETER_SERVER_H_
#define ECPS_PS_GRPC_PARAMETER_SERVER_H_

#include "proto/ecps.grpc.pb.h"
#include "ps/parameter_server.h"
#include "runtime/rpc.h"

namespace ecps {

class GrpcParameterServer final : public v1::ParameterServer::Service {
 public:
  explicit GrpcParameterServer(ParameterServerCore* core) : core_(core) {}
  grpc::Status Pull(grpc::ServerContext*, const v1::PullRequest* req,
                    v1::PullResponse* resp) override {
    return ToGrpcStatus(core_->Pull(*req, resp));
  }
  grpc::Status Push(grpc::ServerContext*, const v1::PushRequest* req,
                    v1::PushResponse*) override {
    return ToGrpcStatus(core_->Push(*req));
  }
  grpc::Status PullDense(grpc::ServerContext*, const v1::PullDenseRequest* req,
                         v1::PullDenseResponse* resp) override {
    return ToGrpcStatus(core_->PullDense(*req, resp));
  }
  grpc::Status PushDense(grpc::ServerContext*, const v1::PushDenseRequest* req,
                         v1::PushDenseResponse*) override {
    return ToGrpcStatus(core_->PushDense(*req));
  }
  grpc::Status ReadRows(grpc::ServerContext*, const v1::ReadRowsRequest* req,
                        v1::ReadRowsResponse* resp) override {
    return ToGrpcStatus(core_->ReadRows(*req, resp));
  }
  grpc::Status Health(grpc::ServerContext*, const v1::HealthRequest* req,
                      v1::HealthResponse* resp) override {
    return ToGrpcStatus(core_->Health(req->header(), resp));
  }
  grpc::Status ApplyParityDeltas(grpc::ServerContext*, const v1::ParityDeltaBatch* req,
                                 v1::ParityDeltaAck* resp) override {
    return ToGrpcStatus(core_->ApplyParityDeltas(*req, resp));
  }
  grpc::Status ReplicateDense(grpc::ServerContext*, const v1::ReplicateDenseRequest* req,
                              v1::ReplicateDenseResponse*) override {
    return ToGrpcStatus(core_->ReplicateDense(*req));
  }
  grpc::Status Freeze(grpc::ServerContext*, const v1::FreezeRequest* req,
                      v1::FreezeResponse*) override {
    return ToGrpcStatus(core_->Freeze(*req));
  }
  grpc::Status ScrubParity(grpc::ServerContext*, const v1::ScrubParityRequest* req,
                           v1::ScrubParityResponse* resp) override {
    return ToGrpcStatus(core_->ScrubParity(*req, resp));
  }
  grpc::Status HotRows(grpc::ServerContext*, const v1::HotRowsRequest* req,
                       v1::HotRowsResponse* resp) override {
    return ToGrpcStatus(core_->HotRows(*req, resp));
  }
  grpc::Status ReadParity(grpc::ServerContext*, const v1::ReadParityRequest* req,
                          v1::ReadParityResponse* resp) override {
    return ToGrpcStatus(core_->ReadParity(*req, resp));
  }
  grpc::Status WriteParity(grpc::ServerContext*, const v1::WriteParityRequest* req,
                           v1::WriteParityResponse*) override {
    return ToGrpcStatus(core_->WriteParity(*req));
  }
  grpc::Status ReadDense(grpc::ServerContext*, const v1::ReadDenseRequest* req,
                         v1::ReadDenseResponse* resp) override {
    return ToGrpcStatus(core_->ReadDense(*req, resp));
  }
  grpc::Status SaveCheckpoint(grpc::ServerContext*, const v1::SaveCheckpointRequest* req,
                              v1::SaveCheckpointResponse* resp) override {
    return ToGrpcStatus(core_->SaveCheckpoint(*req, resp));
  }
  grpc::Status LoadCheckpoint(grpc::ServerContext*, const v1::LoadCheckpointRequest* req,
                              v1::LoadCheckpointResponse*) override {
    return ToGrpcStatus(core_->LoadCheckpoint(*req));
  }
  grpc::Status DenseChecksums(grpc::ServerContext*, const v1::DenseChecksumsRequest* req,
                              v1::DenseChecksumsResponse* resp) override {
    return ToGrpcStatus(core_->DenseChecksums(*req, resp));
  }

 private:
  ParameterServerCore* core_;
};

}  // namespace ecps

#endif  // ECPS_PS_GRPC_PARAMETER_SERVER_H_

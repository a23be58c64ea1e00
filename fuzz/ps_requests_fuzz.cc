// The parameter server's request validation on arbitrary requests: the first byte picks an
// RPC, the rest is that RPC's request (bytes that do not decode are what gRPC refuses before
// any handler runs). The job token is set, so that the fuzzer reaches the checks behind it.
// Two servers answer: one of a job without parity (pulls and pushes) and one of a (2, 1)
// erasure-coded job (parity deltas, parity writes, freezes, dense replicas, checkpoints),
// whose peers are unreachable. A handler may refuse anything; it must never crash.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "proto/ecps.pb.h"
#include "ps/parameter_server.h"
#include "ps/server_parts.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

constexpr char kToken[] = "fuzz-token";

JobSpec Spec(FaultToleranceMode mode, int servers) {
  JobSpec spec;
  spec.cluster.servers = servers;
  spec.cluster.rpc_timeout_ms = 200;
  spec.cluster.max_request_ids = 4096;
  spec.model.embedding_dim = 4;
  spec.model.bottom_mlp = {8, 4};
  spec.model.top_mlp = {8, 4};
  spec.model.table_rows.assign(spec.model.num_sparse, 64);
  spec.fault_tolerance.mode = mode;
  spec.fault_tolerance.k = 2;
  spec.fault_tolerance.r = 1;
  spec.fault_tolerance.ack = AckPolicy::kAsync;
  spec.fault_tolerance.checkpoint.dir = "/nonexistent/ecps-fuzz-checkpoints";
  return spec;
}

std::unique_ptr<ParameterServerCore> MakeCore(FaultToleranceMode mode, int servers, int self) {
  auto core = std::make_unique<ParameterServerCore>(kToken);
  core->SetEpoch(1);
  std::vector<std::string> addresses(servers, "127.0.0.1:1");
  auto parts = BuildServerParts(Spec(mode, servers), self, addresses, core.get(),
                                "fuzz-" + std::to_string(self));
  if (!parts.ok()) std::abort();
  core->Install(std::move(*parts));
  return core;
}

template <typename Request>
bool Decode(const uint8_t* data, size_t size, Request* request) {
  if (!request->ParseFromArray(data, static_cast<int>(size))) return false;
  v1::RequestHeader* h = request->mutable_header();
  h->set_token(kToken);
  if (h->epoch() == 0) h->set_epoch(1);
  return true;
}

// The RPCs of the server of a job without parity: 0 Pull, 1 Push, 2 PushDense, 11 PullDense.
void CallPlain(int rpc, const uint8_t* data, size_t size, ParameterServerCore* plain) {
  switch (rpc) {
    case 0: {
      v1::PullRequest req;
      v1::PullResponse resp;
      if (Decode(data, size, &req)) plain->Pull(req, &resp).IgnoreError();
      break;
    }
    case 1: {
      v1::PushRequest req;
      if (Decode(data, size, &req)) plain->Push(req).IgnoreError();
      break;
    }
    case 2: {
      v1::PushDenseRequest req;
      if (Decode(data, size, &req)) plain->PushDense(req).IgnoreError();
      break;
    }
    case 11: {
      v1::PullDenseRequest req;
      v1::PullDenseResponse resp;
      if (Decode(data, size, &req)) plain->PullDense(req, &resp).IgnoreError();
      break;
    }
  }
}

// The RPCs of the erasure-coded job's server: 3 ReadRows, 4 ApplyParityDeltas, 5 WriteParity,
// 6 Freeze, 7 ReplicateDense, 8 ReadParity, 9 HotRows, 10 SaveCheckpoint.
void CallCoded(int rpc, const uint8_t* data, size_t size, ParameterServerCore* coded) {
  switch (rpc) {
    case 3: {
      v1::ReadRowsRequest req;
      v1::ReadRowsResponse resp;
      if (Decode(data, size, &req)) coded->ReadRows(req, &resp).IgnoreError();
      break;
    }
    case 4: {
      v1::ParityDeltaBatch req;
      v1::ParityDeltaAck ack;
      if (Decode(data, size, &req)) coded->ApplyParityDeltas(req, &ack).IgnoreError();
      break;
    }
    case 5: {
      v1::WriteParityRequest req;
      if (Decode(data, size, &req)) coded->WriteParity(req).IgnoreError();
      break;
    }
    case 6: {
      v1::FreezeRequest req;
      // Whole-server freezes would be held across inputs; the fuzzer's own stay short.
      if (Decode(data, size, &req)) {
        if (req.lease_ms() > 50 || req.lease_ms() == 0) req.set_lease_ms(50);
        coded->Freeze(req).IgnoreError();
      }
      break;
    }
    case 7: {
      v1::ReplicateDenseRequest req;
      if (Decode(data, size, &req)) coded->ReplicateDense(req).IgnoreError();
      break;
    }
    case 8: {
      v1::ReadParityRequest req;
      v1::ReadParityResponse resp;
      if (Decode(data, size, &req)) coded->ReadParity(req, &resp).IgnoreError();
      break;
    }
    case 9: {
      v1::HotRowsRequest req;
      v1::HotRowsResponse resp;
      if (Decode(data, size, &req)) coded->HotRows(req, &resp).IgnoreError();
      break;
    }
    case 10: {
      v1::SaveCheckpointRequest req;
      v1::SaveCheckpointResponse resp;
      if (Decode(data, size, &req)) coded->SaveCheckpoint(req, &resp).IgnoreError();
      break;
    }
  }
}

}  // namespace
}  // namespace ecps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ecps;  // NOLINT
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  static ParameterServerCore* plain = MakeCore(FaultToleranceMode::kNone, 2, 0).release();
  static ParameterServerCore* coded = MakeCore(FaultToleranceMode::kErasureCode, 3, 2).release();
  if (size < 1) return 0;
  const uint8_t rpc = data[0] % 12;
  ++data;
  --size;
  if (rpc <= 2 || rpc == 11) {
    CallPlain(rpc, data, size, plain);
  } else {
    CallCoded(rpc, data, size, coded);
  }
  return 0;
}

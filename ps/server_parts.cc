#include "ps/server_parts.h"

#include "kernels/dlrm.h"
#include "proto/ecps.pb.h"
#include "runtime/rpc.h"

namespace ecps {

void RowCodeShape(const FaultToleranceSection& ft, int* k, int* r) {
  if (ft.mode == "erasure_code") {
    *k = ft.k;
    *r = ft.r;
  } else if (ft.mode == "replication") {
    *k = 1;
    *r = ft.r;
  } else {
    *k = 1;
    *r = 0;
  }
}

absl::StatusOr<ServerParts> BuildServerParts(const JobSpec& spec, int server,
                                             const std::vector<std::string>& addresses,
                                             const ParameterServerCore* core,
                                             DeltaTransport* transport) {
  const FaultToleranceSection& ft = spec.fault_tolerance;
  int k = 1, r = 0;
  RowCodeShape(ft, &k, &r);
  auto placement = Placement::Create(spec.cluster.servers, k, r, spec.model.table_rows);
  if (!placement.ok()) return placement.status();
  auto model = Dlrm::Create(spec.model, 1);
  if (!model.ok()) return model.status();

  ServerParts parts;
  parts.server = server;
  auto store = EmbeddingStore::Create(*placement, server, spec.model.embedding_dim,
                                      spec.optimizer.sparse, spec.job.seed);
  if (!store.ok()) return store.status();
  parts.embeddings = std::move(*store);
  std::vector<std::vector<float>> dense;
  (*model)->InitDense(spec.job.seed, &dense);
  const bool fault_tolerant = r > 0;
  parts.dense = std::make_unique<DenseStore>(spec.optimizer.dense, spec.cluster.servers, server,
                                             std::move(dense),
                                             fault_tolerant ? ft.dense_replicas : 0);
  if (!fault_tolerant) return parts;

  auto code = RowCode::Create(ft.mode, k, r, ft.codec_backend);
  if (!code.ok()) return code.status();
  parts.code = std::move(*code);
  auto parity = ParityStore::Create(*placement, server, spec.model.embedding_dim,
                                    spec.optimizer.sparse, spec.job.seed, parts.code.get());
  if (!parity.ok()) return parity.status();
  parts.parity = std::move(*parity);
  parts.peers = std::make_unique<PeerClient>(addresses, spec.cluster.rpc_timeout_ms);
  DeltaStreamOptions options;
  if (ft.ack == "async") options.window = ft.async_window;
  parts.ack_after_parity = ft.ack != "async";
  parts.ack_timeout_ms = spec.cluster.rpc_timeout_ms;
  const std::string sender = "server-" + std::to_string(server);
  parts.streams = std::make_unique<DeltaStreams>(
      server, spec.cluster.servers, transport != nullptr ? transport : parts.peers.get(),
      options, [core, sender](v1::ParityDeltaBatch* batch) {
        FillHeader(batch->mutable_header(), core->token(), core->epoch(), sender);
      });
  return parts;
}

}  // namespace ecps

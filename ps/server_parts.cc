#include "ps/server_parts.h"

#include <algorithm>

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
                                             const std::string& instance,
                                             DeltaTransport* transport,
                                             const RecoveryHooks* recovery) {
  const bool lost = recovery != nullptr;
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
                                      spec.optimizer.sparse, spec.job.seed, lost);
  if (!store.ok()) return store.status();
  parts.embeddings = std::move(*store);
  std::vector<std::vector<float>> dense;
  (*model)->InitDense(spec.job.seed, &dense);
  const bool fault_tolerant = r > 0;
  parts.dense = std::make_unique<DenseStore>(spec.optimizer.dense, spec.cluster.servers, server,
                                             std::move(dense),
                                             fault_tolerant ? ft.dense_replicas : 0);
  if (!fault_tolerant) {
    if (lost) return absl::FailedPreconditionError("a server without parity cannot be rebuilt");
    return parts;
  }

  auto code = RowCode::Create(ft.mode, k, r, ft.codec_backend);
  if (!code.ok()) return code.status();
  parts.code = std::move(*code);
  auto parity = ParityStore::Create(*placement, server, spec.model.embedding_dim,
                                    spec.optimizer.sparse, spec.job.seed, parts.code.get(), lost);
  if (!parity.ok()) return parity.status();
  parts.parity = std::move(*parity);
  parts.peers = std::make_unique<PeerClient>(addresses, spec.cluster.rpc_timeout_ms);
  DeltaStreamOptions options;
  if (ft.ack == "async") options.window = ft.async_window;
  options.instance = instance;
  parts.ack_after_parity = ft.ack != "async";
  parts.ack_timeout_ms = spec.cluster.rpc_timeout_ms;
  parts.rebuild_wait_ms = std::max(spec.cluster.rpc_timeout_ms, 60000);
  const std::string sender = "server-" + std::to_string(server);
  parts.streams = std::make_unique<DeltaStreams>(
      server, spec.cluster.servers, transport != nullptr ? transport : parts.peers.get(),
      options, [core, sender](v1::ParityDeltaBatch* batch) {
        FillHeader(batch->mutable_header(), core->token(), core->epoch(), sender);
      });
  if (lost) {
    RebuildOptions rebuild;
    rebuild.server = server;
    rebuild.token = core->token();
    rebuild.epoch = [core] { return core->epoch(); };
    rebuild.unusable = recovery->unusable;
    rebuild.live_peers = recovery->live_peers;
    rebuild.rate_limit_mb_s = ft.rebuild_rate_mb_s;
    if (ft.rebuild_rate_mb_s > 0) {
      // Under a rate limit, batches of about 100 ms of reads keep the rebuild smooth.
      const double stripe_bytes = double(parts.parity->payload_bytes()) * k;
      rebuild.batch_stripes = static_cast<int>(std::clamp(
          ft.rebuild_rate_mb_s * 1e6 * 0.1 / stripe_bytes, 16.0, 4096.0));
    }
    parts.rebuilder = std::make_unique<Rebuilder>(rebuild, parts.code.get(), parts.embeddings.get(),
                                                  parts.parity.get(), parts.dense.get(),
                                                  parts.peers.get());
    parts.rebuild_wait_ms = std::max(spec.cluster.rpc_timeout_ms, 60000);
  }
  return parts;
}

}  // namespace ecps

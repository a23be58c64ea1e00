#include "ps/server_parts.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "absl/strings/str_format.h"
#include "checkpoint/layout.h"
#include "kernels/dlrm.h"
#include "kernels/optimizers.h"
#include "domain/spec_config.h"
#include "proto/ecps.pb.h"
#include "ps/coded_redundancy.h"
#include "runtime/access_policy.h"
#include "runtime/rpc.h"

namespace ecps {

void RowCodeShape(const FaultToleranceSection& ft, int* k, int* r) {
  if (ft.mode == FaultToleranceMode::kErasureCode) {
    *k = ft.k;
    *r = ft.r;
  } else if (ft.mode == FaultToleranceMode::kReplication) {
    *k = 1;
    *r = ft.r;
  } else {
    *k = 1;
    *r = 0;
  }
}

namespace {

// What a resuming server reads its rows, parity and dense tensors from: the checkpoint's
// tables, by logical row id whatever layout wrote them. The sources read `readers`: the
// struct must stay where it is while they are used.
struct ResumeSources {
  Manifest manifest;
  std::vector<std::unique_ptr<TableReader>> readers;
  EmbeddingStore::RowSource rows;
  ParityStore::StripeSource stripes;
};

absl::Status OpenResumeSources(const JobSpec& spec, const Placement* pl, int k,
                               ResumeSources* out) {
  auto opened = OpenResumeCheckpoint(spec, /*verify=*/false);
  if (!opened.ok()) return opened.status();
  out->manifest = std::move(*opened);
  for (int t = 0; t < static_cast<int>(spec.model.table_rows.size()); ++t) {
    auto reader = TableReader::Open(out->manifest, t);
    if (!reader.ok()) return reader.status();
    out->readers.push_back(std::move(*reader));
  }
  std::vector<std::unique_ptr<TableReader>>& readers = out->readers;
  out->rows = [&readers](int table, const int64_t* rows, int64_t n, float* data) {
    return readers[table]->ReadRows(rows, n, data);
  };
  const int pf = out->manifest.layout.payload_floats;
  out->stripes = [&readers, pf, pl, k](int table, int64_t stripe,
                                       std::vector<std::vector<uint8_t>>* data) {
    data->resize(k);
    std::vector<int64_t> rows;
    for (int j = 0; j < k; ++j) {
      (*data)[j].assign(sizeof(float) * pf, 0);
      int64_t row = stripe * k + j;
      if (row < pl->rows(table)) rows.push_back(row);  // past the end: a zero padding row
    }
    std::vector<float> buffer(rows.size() * pf);
    absl::Status s =
        readers[table]->ReadRows(rows.data(), static_cast<int64_t>(rows.size()), buffer.data());
    if (!s.ok()) return s;
    for (size_t j = 0; j < rows.size(); ++j) {
      std::memcpy((*data)[j].data(), buffer.data() + j * pf, sizeof(float) * pf);
    }
    return absl::OkStatus();
  };
  return absl::OkStatus();
}

// The options of a fault-tolerant server's CodedRedundancy (`parity_payload_bytes`: a
// parity row's bytes).
CodedRedundancy::Options CodedOptions(const JobSpec& spec, int server, const std::string& instance,
                                      const ParameterServerCore* core, DeltaTransport* transport,
                                      const UnreachableFn& report_unreachable,
                                      size_t parity_payload_bytes, int rebuild_wait_ms) {
  const FaultToleranceSection& ft = spec.fault_tolerance;
  int k = 1, r = 0;
  RowCodeShape(ft, &k, &r);
  const std::string sender = "server-" + std::to_string(server);
  CodedRedundancy::Options coded;
  coded.server = server;
  coded.instance = instance;
  coded.ack_after_parity = ft.ack != AckPolicy::kAsync;
  coded.ack_timeout_ms = spec.cluster.rpc_timeout_ms;
  coded.dense_ship_wait_ms = rebuild_wait_ms;
  coded.report_unreachable = report_unreachable;
  coded.header = [core, sender](v1::RequestHeader* header) {
    FillHeader(header, core->token(), core->epoch(), sender);
  };
  coded.transport = ft.parity_transport;
  coded.test_transport = transport;
  if (ft.ack == AckPolicy::kAsync) {
    coded.streams.window = ft.async_window;
    coded.streams.linger_ms = ft.async_linger_ms;
  }
  coded.streams.instance = instance;
  coded.streams.on_unreachable = report_unreachable;
  coded.scrub.interval_s = ft.scrub.interval_s;
  coded.scrub.rate_mb_s = ft.scrub.rate_mb_s;
  // Batches of about 100 ms of reads at the cap (n members per stripe).
  const double stripe_bytes = double(parity_payload_bytes) * (k + r);
  coded.scrub.batch_stripes =
      static_cast<int>(std::clamp(ft.scrub.rate_mb_s * 1e6 * 0.1 / stripe_bytes, 16.0, 1024.0));
  return coded;
}

// The options of a replacement server's Rebuilder.
RebuildOptions RebuildOptionsOf(const JobSpec& spec, int server, const std::string& instance,
                                const ParameterServerCore* core, const RecoveryHooks& recovery,
                                size_t parity_payload_bytes) {
  const FaultToleranceSection& ft = spec.fault_tolerance;
  int k = 1, r = 0;
  RowCodeShape(ft, &k, &r);
  RebuildOptions rebuild;
  rebuild.server = server;
  rebuild.instance = instance;
  if (const char* hold = std::getenv("ECPS_DRILL_HOLD_FREEZE_MS"); hold != nullptr) {
    rebuild.hold_freeze_ms = std::max(0, std::atoi(hold));
  }
  rebuild.token = core->token();
  rebuild.epoch = [core] { return core->epoch(); };
  rebuild.unusable = recovery.unusable;
  rebuild.live_peers = recovery.live_peers;
  rebuild.training_done = recovery.training_done;
  rebuild.rate_limit_mb_s = ft.rebuild_rate_mb_s;
  rebuild.settle_ms = 20 + (ft.ack == AckPolicy::kAsync ? ft.async_linger_ms : 0);
  if (ft.rebuild_rate_mb_s > 0) {
    // Under a rate limit, batches of about 100 ms of reads keep the rebuild smooth.
    const double stripe_bytes = double(parity_payload_bytes) * k;
    rebuild.batch_stripes =
        static_cast<int>(std::clamp(ft.rebuild_rate_mb_s * 1e6 * 0.1 / stripe_bytes, 16.0, 4096.0));
  }
  return rebuild;
}

absl::StatusOr<ServerParts> BuildParts(const JobSpec& spec, int server,
                                       const std::vector<std::string>& addresses,
                                       const ParameterServerCore* core,
                                       const std::string& instance, DeltaTransport* transport,
                                       const RecoveryHooks* recovery,
                                       UnreachableFn report_unreachable) {
  const bool lost = recovery != nullptr;
  const FaultToleranceSection& ft = spec.fault_tolerance;
  int k = 1, r = 0;
  RowCodeShape(ft, &k, &r);
  auto placement = Placement::Create(spec.cluster.servers, k, r, spec.model.table_rows);
  if (!placement.ok()) return placement.status();
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), 1);
  if (!model.ok()) return model.status();

  ServerParts parts;
  parts.server = server;
  parts.instance = instance;
  parts.max_request_ids = spec.cluster.max_request_ids;
  parts.max_reply_bytes = int64_t{spec.cluster.max_reply_mb} << 20;
  parts.checkpoint_root = spec.fault_tolerance.checkpoint.dir;
  // Resuming (and not a replacement, which rebuilds from its peers): rows, parity and dense
  // tensors come from the checkpoint, read by logical row id whatever layout wrote it.
  const bool resume = !spec.job.resume_from.empty() && !lost;
  ResumeSources from;
  if (resume) {
    if (absl::Status s = OpenResumeSources(spec, &*placement, k, &from); !s.ok()) return s;
  }
  auto store = EmbeddingStore::Create(*placement, server, spec.model.embedding_dim,
                                      ToSparseOptimizerConfig(spec.optimizer.sparse), spec.job.seed,
                                      lost, resume ? &from.rows : nullptr);
  if (!store.ok()) return store.status();
  parts.embeddings = std::move(*store);
  std::vector<std::vector<float>> dense;
  (*model)->InitDense(spec.job.seed, &dense);
  const bool fault_tolerant = r > 0;
  parts.dense = std::make_unique<DenseStore>(ToDenseOptimizerConfig(spec.optimizer.dense),
                                             spec.cluster.servers, server, std::move(dense),
                                             fault_tolerant ? ft.dense_replicas : 0);
  if (resume) {
    for (int t = 0; t < parts.dense->num_tensors(); ++t) {
      if (!parts.dense->Holds(t)) continue;
      std::vector<float> weights, state;
      int64_t version = 0;
      if (absl::Status s = ReadDense(from.manifest, t, &weights, &state, &version); !s.ok()) {
        return s;
      }
      if (absl::Status s = parts.dense->Restore(t, weights, state, version); !s.ok()) return s;
    }
  }
  if (!fault_tolerant) {
    if (lost) return absl::FailedPreconditionError("a server without parity cannot be rebuilt");
    parts.redundancy = std::make_unique<NoRedundancy>(server);
    return parts;
  }

  auto code = RowCode::Create(ft.mode, k, r, ft.codec_backend);
  if (!code.ok()) return code.status();
  auto parity = ParityStore::Create(*placement, server, spec.model.embedding_dim,
                                    ToSparseOptimizerConfig(spec.optimizer.sparse), spec.job.seed,
                                    code->get(), lost, resume ? &from.stripes : nullptr);
  if (!parity.ok()) return parity.status();
  auto peers = std::make_unique<PeerClient>(addresses, spec.cluster.rpc_timeout_ms);
  parts.rebuild_wait_ms = std::max(spec.cluster.rpc_timeout_ms, 60000);
  CodedRedundancy::Options coded =
      CodedOptions(spec, server, instance, core, transport, report_unreachable,
                   (*parity)->payload_bytes(), parts.rebuild_wait_ms);
  auto redundancy = std::make_unique<CodedRedundancy>(
      std::move(coded), parts.embeddings->placement(), parts.dense.get(), *std::move(code),
      *std::move(parity), std::move(peers));
  if (lost) {
    const RebuildOptions rebuild = RebuildOptionsOf(spec, server, instance, core, *recovery,
                                                    redundancy->parity()->payload_bytes());
    parts.rebuilder = std::make_unique<Rebuilder>(
        rebuild, redundancy->code(), parts.embeddings.get(), redundancy->parity(),
        parts.dense.get(), redundancy->peers());
  }
  parts.redundancy = std::move(redundancy);
  return parts;
}

}  // namespace

// Every server holds as many slots of each table as every other (the placement is
// balanced), so the id does not change the answer; it stays for a placement that is not.
int64_t ServerTableBytes(const JobSpec& spec, int /*server*/) {
  int k = 1, r = 0;
  RowCodeShape(spec.fault_tolerance, &k, &r);
  auto placement = Placement::Create(spec.cluster.servers, k, r, spec.model.table_rows);
  if (!placement.ok()) return 0;
  const int64_t row_bytes =
      sizeof(float) *
      (spec.model.embedding_dim +
       SparseStateFloats(ToSparseOptimizerConfig(spec.optimizer.sparse), spec.model.embedding_dim));
  int64_t bytes = 0;
  for (int t = 0; t < placement->num_tables(); ++t) {
    bytes += (placement->DataSlots(t) + placement->ParitySlots(t)) * row_bytes;
  }
  return bytes;
}

int64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

absl::StatusOr<ServerParts> BuildServerParts(const JobSpec& spec, int server,
                                             const std::vector<std::string>& addresses,
                                             const ParameterServerCore* core,
                                             const std::string& instance,
                                             DeltaTransport* transport,
                                             const RecoveryHooks* recovery,
                                             UnreachableFn report_unreachable) {
  // Refused up front, with the figures, rather than allocated and then killed by the kernel
  // on first touch (or thrown out of an mmap as std::bad_alloc).
  const int64_t need = ServerTableBytes(spec, server);
  const int64_t have = AvailableMemoryBytes();
  auto too_big = [&](const char* why) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "server %d cannot allocate its tables: they need %.2f GiB (data rows and parity of "
        "%d tables) and %s (MemAvailable %.2f GiB); make model.table_rows smaller or add "
        "servers",
        server, need / double(1 << 30), static_cast<int>(spec.model.table_rows.size()), why,
        have / double(1 << 30)));
  };
  if (have > 0 && need > have) return too_big("this machine has less memory free");
  try {
    return BuildParts(spec, server, addresses, core, instance, transport, recovery,
                      std::move(report_unreachable));
  } catch (const std::bad_alloc&) {
    return too_big("the allocation failed");
  }
}

absl::StatusOr<std::unique_ptr<TcpDeltaListener>> ServeParityOverTcp(
    const JobSpec& spec, ParameterServerCore* core, const std::string& host) {
  if (spec.fault_tolerance.parity_transport != ParityTransport::kTcp ||
      !KeepsRedundancy(spec.fault_tolerance.mode)) {
    return nullptr;
  }
  if (ProcessTls() != nullptr) {
    // The spec refuses this; a caller that built its own spec must not get a plaintext port.
    return absl::FailedPreconditionError(
        "fault_tolerance.parity_transport: tcp is not encrypted; this process uses TLS");
  }
  auto listener = std::make_unique<TcpDeltaListener>(
      [core](const v1::ParityDeltaBatch& batch, v1::ParityDeltaAck* ack) {
        absl::Status admitted = core->Admit(
            nullptr, batch.header(), AccessOf(kParameterServerAccess, "ApplyParityDeltas"),
            "ApplyParityDeltas");
        return admitted.ok() ? core->ApplyParityDeltas(batch, ack) : admitted;
      },
      [core](std::string_view message, std::string_view mac) {
        return core->CheckPeerMac(message, mac);
      },
      [core](const absl::Status& why, const std::string& from) {
        core->CountRefusal(why, "a parity connection or frame over TCP", from);
      });
  if (absl::Status s = listener->Start(host); !s.ok()) return s;
  core->set_tcp_delta_port(listener->port());
  return listener;
}

}  // namespace ecps

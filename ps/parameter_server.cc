#include "ps/parameter_server.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <map>
#include <vector>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "proto/ecps.pb.h"
#include "ps/wire_bytes.h"
#include "runtime/error_kind.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

absl::Span<const int64_t> RowsOf(const v1::TableRows& t) {
  return absl::MakeConstSpan(t.rows().data(), t.rows().size());
}

}  // namespace

ParameterServerCore::~ParameterServerCore() {
  // Stop the rebuild and the redundancy's sender threads before the stores they use go away.
  parts_.rebuilder.reset();
  parts_.redundancy.reset();
}

void ParameterServerCore::UpdatePeerAddress(int server, const std::string& address) {
  if (ready()) parts_.redundancy->SetPeerAddress(server, address);
}

void ParameterServerCore::StartRebuild() {
  if (parts_.rebuilder != nullptr) parts_.rebuilder->Start();
}

bool ParameterServerCore::rebuilt() const {
  return parts_.rebuilder == nullptr || parts_.rebuilder->done();
}

namespace {

// Views of a request's rows, table by table (no copy of the ids).
template <typename Tables>
std::vector<TableRowsRef> RowRefs(const Tables& tables) {
  std::vector<TableRowsRef> refs;
  refs.reserve(tables.size());
  for (const v1::TableRows& t : tables) refs.push_back({t.table(), RowsOf(t)});
  return refs;
}

}  // namespace

template <typename Tables>
absl::Status ParameterServerCore::EnsureRebuilt(const Tables& tables) const {
  if (parts_.rebuilder == nullptr || parts_.embeddings->all_valid()) return absl::OkStatus();
  return parts_.rebuilder->EnsureRows(RowRefs(tables), parts_.rebuild_wait_ms);
}

void ParameterServerCore::Install(ServerParts parts) {
  parts_ = std::move(parts);
  Redundancy::Hooks hooks;
  hooks.check_peer = [this](int server, const std::string& instance, uint64_t epoch,
                            const char* what) { return CheckPeer(server, instance, epoch, what); };
  hooks.refuse = [this](absl::Status status, const v1::RequestHeader& header, const char* what) {
    return Refuse(std::move(status), header, what);
  };
  hooks.dense_ready = [this] {
    return parts_.rebuilder == nullptr || parts_.rebuilder->dense_ready();
  };
  parts_.redundancy->Start(std::move(hooks));
  ready_.store(true, std::memory_order_release);
}

absl::StatusOr<uint64_t> ParameterServerCore::BeginUpdate(const v1::PushRequest* push) {
  constexpr std::chrono::seconds kWait{60};
  if (push == nullptr) return gate_.Begin(nullptr, kWait);
  const int k = parts_.embeddings->placement().k();
  const UpdateGate::Touches touches = [push, k](const std::function<bool(uint64_t)>& frozen) {
    for (const v1::TableRows& t : push->tables()) {
      for (int64_t row : t.rows()) {
        if (frozen(UpdateGate::StripeKey(t.table(), row / k))) return true;
      }
    }
    return false;
  };
  return gate_.Begin(&touches, kWait);
}

void ParameterServerCore::EndUpdate(uint64_t generation) { gate_.End(generation); }

absl::Status ParameterServerCore::Refuse(absl::Status status, const v1::RequestHeader& header,
                                         const char* what) const {
  // "Not in this server's map yet" asks the sender to retry: it is not a refusal.
  if (absl::IsUnavailable(status)) return status;
  const int64_t n = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
  // Every refusal counts; the log gets the first few and then one in a thousand, so that a
  // client repeating a bad request cannot fill the disk.
  if (n <= 20 || n % 1000 == 0) {
    spdlog::warn("server {}: refused {} from {} ({} refused so far): {}", parts_.server, what,
                 header.sender().empty() ? std::string("an unnamed sender") : header.sender(),
                 n, status.ToString());
  }
  return status;
}

void ParameterServerCore::CountRefusal(const absl::Status& why, const char* what,
                                       const std::string& from) const {
  v1::RequestHeader header;
  header.set_sender(from);
  Refuse(why, header, what).IgnoreError();  // counted and logged: that is all
}

absl::Status ParameterServerCore::Admit(const grpc::ServerContext* context,
                                        const v1::RequestHeader& header, RoleSet allowed,
                                        std::string_view method) const {
  absl::StatusOr<Caller> caller = gatekeeper_.Authorize(context, header, allowed, method);
  if (caller.ok()) return absl::OkStatus();
  return Refuse(caller.status(), header, std::string(method).c_str());
}

absl::Status ParameterServerCore::CheckLimits(int64_t ids, int64_t reply_bytes,
                                              const char* what) const {
  if (ids > parts_.max_request_ids) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " names ", ids, " row ids, more than cluster.max_request_ids = ",
        parts_.max_request_ids, ": split it"));
  }
  if (reply_bytes > parts_.max_reply_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " would be answered with ", reply_bytes >> 20, " MiB, more than cluster.max_reply_mb = ",
        parts_.max_reply_bytes >> 20, ": split it"));
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::CheckRequest(const v1::RequestHeader& header,
                                               bool any_epoch) const {
  if (absl::Status s = gatekeeper_.Authenticate(header); !s.ok()) return s;
  if (fenced()) {
    return absl::FailedPreconditionError("this server was declared dead and replaced (fenced)");
  }
  if (!any_epoch && header.epoch() < epoch()) {
    return WithErrorKind(
        absl::FailedPreconditionError("stale epoch " + std::to_string(header.epoch()) + " < " +
                                      std::to_string(epoch()) + " from " + header.sender()),
        ErrorKind::kStaleEpoch);
  }
  if (!ready()) return absl::UnavailableError("server is still initialising its tables");
  return absl::OkStatus();
}

absl::Status ParameterServerCore::CheckCoordinatorTerm(const v1::RequestHeader& header) const {
  if (absl::Status deposed = coordinator_term_.Check(header.term()); !deposed.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("refused ", header.sender(), "'s request: ", deposed.message()));
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Pull(const v1::PullRequest& request,
                                       v1::PullResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  const int dim = parts_.embeddings->dim();
  const int payload = parts_.embeddings->payload_floats();
  int64_t ids = 0, with_state = 0;
  for (const v1::TableRows& t : request.tables()) ids += t.rows_size();
  for (const v1::TableRows& t : request.with_state()) with_state += t.rows_size();
  const int64_t reply = request.prefetch() ? 0 : (ids * dim + with_state * payload) *
                                                     static_cast<int64_t>(sizeof(float));
  if (absl::Status s = CheckLimits(ids + with_state, reply, "pull"); !s.ok()) {
    return Refuse(s, request.header(), "a pull");
  }
  for (const auto* list : {&request.tables(), &request.with_state()}) {
    for (const v1::TableRows& t : *list) {
      if (absl::Status s = parts_.embeddings->Validate(t.table(), RowsOf(t)); !s.ok()) return s;
    }
  }
  if (request.prefetch()) {
    if (parts_.rebuilder != nullptr && !parts_.embeddings->all_valid()) {
      parts_.rebuilder->Prefetch(RowRefs(request.tables()));
    }
    return absl::OkStatus();
  }
  if (absl::Status s = EnsureRebuilt(request.tables()); !s.ok()) return s;
  if (absl::Status s = EnsureRebuilt(request.with_state()); !s.ok()) return s;
  for (const v1::TableRows& t : request.tables()) {
    std::string* bytes = response->add_weights();
    bytes->resize(sizeof(float) * dim * t.rows_size());
    absl::Status s = parts_.embeddings->Pull(t.table(), RowsOf(t), reinterpret_cast<float*>(bytes->data()));
    if (!s.ok()) return s;
  }
  if (request.with_state_size() > 0) response->set_payload_floats(payload);
  for (const v1::TableRows& t : request.with_state()) {
    std::string* bytes = response->add_payloads();
    bytes->resize(sizeof(float) * payload * t.rows_size());
    absl::Status s = parts_.embeddings->ReadPayloads(t.table(), RowsOf(t),
                                                     reinterpret_cast<float*>(bytes->data()));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Push(const v1::PushRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  const int dim = parts_.embeddings->dim();
  if (request.grads_size() != request.tables_size()) {
    return absl::InvalidArgumentError("push has " + std::to_string(request.tables_size()) +
                                      " tables but " + std::to_string(request.grads_size()) +
                                      " gradient blocks");
  }
  int64_t ids = 0;
  for (const v1::TableRows& t : request.tables()) ids += t.rows_size();
  if (absl::Status s = CheckLimits(ids, 0, "push"); !s.ok()) {
    return Refuse(s, request.header(), "a push");
  }
  // Each table's rows are resolved to their slots once, here, and updated with the result.
  std::vector<EmbeddingStore::Rows> rows;
  rows.reserve(request.tables_size());
  for (int i = 0; i < request.tables_size(); ++i) {
    const v1::TableRows& t = request.tables(i);
    size_t want = sizeof(float) * dim * t.rows_size();
    if (request.grads(i).size() != want) {
      return absl::InvalidArgumentError(
          "gradients of table " + std::to_string(t.table()) + " have " +
          std::to_string(request.grads(i).size()) + " bytes, expected " + std::to_string(want) +
          " (" + std::to_string(t.rows_size()) + " rows of dimension " + std::to_string(dim) +
          ")");
    }
    absl::StatusOr<EmbeddingStore::Rows> resolved =
        parts_.embeddings->Resolve(t.table(), RowsOf(t));
    if (!resolved.ok()) return resolved.status();
    rows.push_back(*std::move(resolved));
    if (const int64_t bad = FirstNonFinite(request.grads(i)); bad >= 0) {
      float v;
      std::memcpy(&v, request.grads(i).data() + bad * sizeof(float), sizeof(float));
      return Refuse(absl::InvalidArgumentError(absl::StrCat(
                        "gradient of table ", t.table(), " row ", t.rows(bad / dim), " is ", v,
                        " (not finite): nothing of this push was applied")),
                    request.header(), "a push");
    }
  }
  // A replacement rebuilds the rows first; waiting for that is not an update in flight
  // (a freeze must not wait for it: the rebuild itself freezes the other servers).
  if (absl::Status s = EnsureRebuilt(request.tables()); !s.ok()) return s;
  absl::StatusOr<uint64_t> generation = BeginUpdate(&request);
  if (!generation.ok()) return generation.status();
  absl::Status status = parts_.redundancy->ApplyPush(*parts_.embeddings, rows, request);
  EndUpdate(*generation);
  return status;
}

absl::Status ParameterServerCore::PullDense(const v1::PullDenseRequest& request,
                                            v1::PullDenseResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  for (int tensor : request.tensors()) {
    if (absl::Status s = parts_.dense->Check(tensor, -1); !s.ok()) return s;
  }
  if (parts_.rebuilder != nullptr) {
    if (absl::Status s = parts_.rebuilder->EnsureDense(parts_.rebuild_wait_ms); !s.ok()) return s;
  }
  if (request.held_versions_size() != 0 &&
      request.held_versions_size() != request.tensors_size()) {
    return absl::InvalidArgumentError("dense pull has " + std::to_string(request.tensors_size()) +
                                      " tensors and " +
                                      std::to_string(request.held_versions_size()) +
                                      " held_versions");
  }
  std::vector<float> values, state;
  for (int e = 0; e < request.tensors_size(); ++e) {
    const int tensor = request.tensors(e);
    int64_t version = 0;
    absl::Status s = request.with_state()
                         ? parts_.dense->Snapshot(tensor, &values, &state, &version)
                         : parts_.dense->Read(tensor, &values, &version);
    if (!s.ok()) return s;
    // The worker holds these very bits (weights and state read together above): only the
    // version travels.
    if (request.with_state() && request.held_versions_size() != 0 &&
        request.held_versions(e) == version) {
      response->add_values();
      response->add_versions(version);
      response->add_states();
      continue;
    }
    response->add_values()->assign(reinterpret_cast<const char*>(values.data()),
                                   values.size() * sizeof(float));
    response->add_versions(version);
    if (request.with_state()) {
      response->add_states()->assign(reinterpret_cast<const char*>(state.data()),
                                     state.size() * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::PushDense(const v1::PushDenseRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (request.grads_size() != request.tensors_size()) {
    return absl::InvalidArgumentError("dense push has " + std::to_string(request.tensors_size()) +
                                      " tensors but " + std::to_string(request.grads_size()) +
                                      " gradients");
  }
  for (int i = 0; i < request.tensors_size(); ++i) {
    const std::string& g = request.grads(i);
    if (g.size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError("dense gradient size is not a multiple of 4 bytes");
    }
    absl::Status s = parts_.dense->Check(request.tensors(i), static_cast<int64_t>(g.size() / sizeof(float)));
    if (!s.ok()) return s;
    if (const int64_t bad = FirstNonFinite(g); bad >= 0) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat(
                        "dense gradient of tensor ", request.tensors(i), " has a non-finite "
                        "value at ", bad, ": nothing of this push was applied")),
                    request.header(), "a dense push");
    }
  }
  if (parts_.rebuilder != nullptr) {
    if (absl::Status s = parts_.rebuilder->EnsureDense(parts_.rebuild_wait_ms); !s.ok()) return s;
  }
  absl::StatusOr<uint64_t> generation = BeginUpdate();
  if (!generation.ok()) return generation.status();
  std::vector<float> grad;
  absl::Status status;
  for (int i = 0; i < request.tensors_size() && status.ok(); ++i) {
    const std::string& g = request.grads(i);
    const int tensor = request.tensors(i);
    grad.resize(g.size() / sizeof(float));
    CopyBytes(grad.data(), g.data(), g.size());
    status = parts_.dense->ApplyAndShip(
        tensor, grad.data(), static_cast<int64_t>(grad.size()),
        [&](int64_t version, const std::vector<float>& weights, const std::vector<float>& state) {
          return parts_.redundancy->DenseUpdated(tensor, g, version, weights, state);
        });
  }
  EndUpdate(*generation);
  return status;
}

absl::Status ParameterServerCore::ReadRows(const v1::ReadRowsRequest& request,
                                           v1::ReadRowsResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  std::vector<const v1::TableRows*> tables;
  if (request.has_rows()) tables.push_back(&request.rows());
  for (const v1::TableRows& t : request.tables()) tables.push_back(&t);
  size_t rows = 0;
  int64_t stripes = 0;
  for (const v1::TableRows* t : tables) rows += t->rows_size();
  for (const v1::TableStripes& t : request.parity()) stripes += t.stripes_size();
  const int64_t row_bytes = sizeof(float) * parts_.embeddings->payload_floats();
  if (absl::Status s = CheckLimits(static_cast<int64_t>(rows) + stripes,
                                   (static_cast<int64_t>(rows) + stripes) * row_bytes, "a read");
      !s.ok()) {
    return Refuse(s, request.header(), "a read");
  }
  for (const v1::TableRows* t : tables) {
    if (absl::Status s = parts_.embeddings->Validate(t->table(), RowsOf(*t)); !s.ok()) return s;
  }
  std::vector<TableStripe> parity;
  for (const v1::TableStripes& t : request.parity()) {
    for (int64_t stripe : t.stripes()) parity.push_back({t.table(), stripe});
  }
  if (!parity.empty()) {
    if (absl::Status s = parts_.redundancy->CheckParityRead(parity); !s.ok()) return s;
  }
  if (rows > 0 && request.has_rebuilder()) {
    // Before the read: no delta sent to the rebuilder after it may straddle it.
    parts_.redundancy->BeforeRebuildRead(request.rebuilder());
  }
  const int pf = parts_.embeddings->payload_floats();
  std::string* bytes = response->mutable_payloads();
  bytes->resize(sizeof(float) * pf * rows);
  response->set_payload_floats(pf);
  response->mutable_versions()->Resize(static_cast<int>(rows), 0);
  size_t done = 0;
  for (const v1::TableRows* t : tables) {
    absl::Status s = parts_.embeddings->ReadPayloads(
        t->table(), RowsOf(*t), reinterpret_cast<float*>(bytes->data()) + done * pf,
        response->mutable_versions()->mutable_data() + done);
    if (!s.ok()) return s;
    done += t->rows_size();
  }
  if (!parity.empty()) return parts_.redundancy->ReadParity(parity, response->mutable_parity());
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Health(const v1::RequestHeader& header,
                                         v1::HealthResponse* response) const {
  if (absl::Status s = gatekeeper_.Authenticate(header); !s.ok()) return s;
  response->set_state(ready() ? v1::NODE_ACTIVE : v1::NODE_STARTING);
  response->set_epoch(epoch());
  FillStats(response->mutable_stats());
  return absl::OkStatus();
}

void ParameterServerCore::FillStats(v1::ServerStats* stats) const {
  stats->set_refused_requests(refused_.load(std::memory_order_relaxed));
  stats->set_freezes_expired(gate_.expired());
  stats->set_freezes_held(gate_.active());
  if (!ready()) return;
  stats->set_data_rows(parts_.embeddings->data_rows());
  stats->set_bytes(parts_.embeddings->bytes() + parts_.dense->bytes());
  stats->set_pulls(parts_.embeddings->pulls());
  stats->set_pushes(parts_.embeddings->pushes());
  stats->set_dense_tensors(parts_.dense->owned_tensors());
  if (parts_.rebuilder != nullptr) {
    RebuildProgress p = parts_.rebuilder->progress();
    stats->set_rebuild_rows_done(p.rows_done);
    stats->set_rebuild_rows_total(p.rows_total);
    stats->set_on_demand_rebuilds(p.on_demand);
    stats->set_on_demand_batches(p.on_demand_batches);
    stats->set_rebuild_rows_per_s(p.rows_per_s);
    stats->set_frozen_rebuild_stripes(p.frozen_stripes);
  }
  parts_.redundancy->FillStats(stats);
}

absl::Status ParameterServerCore::SaveCheckpoint(const v1::SaveCheckpointRequest& request,
                                                 v1::SaveCheckpointResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (absl::Status s = CheckCoordinatorTerm(request.header()); !s.ok()) return s;
  if (request.tmp_dir().empty()) return absl::InvalidArgumentError("checkpoint tmp_dir is empty");
  {
    // Only an uncommitted step-N.tmp folder (BeginCheckpoint's) is written: never a
    // committed checkpoint, nor any other folder.
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(request.tmp_dir()).lexically_normal();
    std::error_code ec;
    const std::string name = dir.filename().string();
    if (!absl::StartsWith(name, "step-") || !absl::EndsWith(name, ".tmp")) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat(
                        "checkpoint folder ", request.tmp_dir(),
                        " is not an uncommitted step-N.tmp folder")),
                    request.header(), "a checkpoint write");
    }
    if (fs::exists(dir / "MANIFEST.json", ec)) {
      return Refuse(absl::FailedPreconditionError(absl::StrCat(
                        "checkpoint folder ", request.tmp_dir(),
                        " holds a MANIFEST.json: a committed checkpoint is never rewritten")),
                    request.header(), "a checkpoint write");
    }
    if (!parts_.checkpoint_root.empty() &&
        fs::weakly_canonical(dir.parent_path(), ec) !=
            fs::weakly_canonical(fs::path(parts_.checkpoint_root), ec)) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat(
                        "checkpoint folder ", request.tmp_dir(), " is not in this job's "
                        "checkpoint directory ", parts_.checkpoint_root)),
                    request.header(), "a checkpoint write");
    }
  }
  if (!rebuilt() || !parts_.embeddings->all_valid()) {
    return absl::FailedPreconditionError("server " + std::to_string(parts_.server) +
                                         " is still rebuilding: cannot checkpoint");
  }
  const EmbeddingStore& store = *parts_.embeddings;
  const Placement& placement = store.placement();
  const int pf = store.payload_floats();
  int64_t bytes = 0;
  constexpr int64_t kChunkSlots = 16384;
  std::vector<int64_t> rows;
  std::vector<float> payloads;
  for (int t = 0; t < placement.num_tables(); ++t) {
    auto writer = TableWriter::Open(request.tmp_dir(), t, placement.rows(t), pf);
    if (!writer.ok()) return writer.status();
    for (int64_t slot = 0; slot < store.DataSlots(t);) {
      rows.clear();
      payloads.clear();
      auto next = store.ReadSlots(t, slot, kChunkSlots, &rows, &payloads);
      if (!next.ok()) return next.status();
      slot = *next;
      if (rows.empty()) continue;
      absl::Status s = (*writer)->WriteRows(rows.data(), payloads.data(),
                                            static_cast<int64_t>(rows.size()));
      if (!s.ok()) return s;
    }
    if (absl::Status s = (*writer)->Finish(); !s.ok()) return s;
    response->add_table_checksums((*writer)->checksum());
    response->add_rows_written((*writer)->rows_written());
    bytes += (*writer)->rows_written() * pf * static_cast<int64_t>(sizeof(float));
  }
  for (int t = 0; t < parts_.dense->num_tensors(); ++t) {
    if (!parts_.dense->Owns(t)) continue;
    std::vector<float> weights, state;
    int64_t version = 0;
    if (absl::Status s = parts_.dense->Snapshot(t, &weights, &state, &version); !s.ok()) return s;
    auto entry = WriteDense(request.tmp_dir(), t, version, weights, state);
    if (!entry.ok()) return entry.status();
    v1::CheckpointDenseEntry* d = response->add_dense();
    d->set_tensor(t);
    d->set_version(entry->version);
    d->set_checksum(entry->checksum);
    bytes += kDenseHeaderBytes + static_cast<int64_t>((weights.size() + state.size()) * sizeof(float));
  }
  response->set_bytes(bytes);
  return absl::OkStatus();
}

absl::Status ParameterServerCore::LoadCheckpoint(const v1::LoadCheckpointRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  if (absl::Status s = CheckCoordinatorTerm(request.header()); !s.ok()) return s;
  if (parts_.redundancy->rebuilds()) {
    return absl::FailedPreconditionError("rollback to a checkpoint is for modes without parity");
  }
  auto manifest = ReadManifest(request.dir());
  if (!manifest.ok()) return manifest.status();
  const Placement& placement = parts_.embeddings->placement();
  if (manifest->layout.table_rows.size() != static_cast<size_t>(placement.num_tables()) ||
      manifest->layout.payload_floats != parts_.embeddings->payload_floats()) {
    return absl::FailedPreconditionError(request.dir() + "/MANIFEST.json: does not fit the model");
  }
  std::vector<std::unique_ptr<TableReader>> readers;
  for (int t = 0; t < placement.num_tables(); ++t) {
    auto reader = TableReader::Open(*manifest, t);
    if (!reader.ok()) return reader.status();
    readers.push_back(std::move(*reader));
  }
  absl::Status loaded =
      parts_.embeddings->Load([&readers](int table, const int64_t* rows, int64_t n, float* out) {
        return readers[table]->ReadRows(rows, n, out);
      });
  if (!loaded.ok()) return loaded;
  for (int t = 0; t < parts_.dense->num_tensors(); ++t) {
    if (!parts_.dense->Holds(t)) continue;
    std::vector<float> weights, state;
    int64_t version = 0;
    if (absl::Status s = ecps::ReadDense(*manifest, t, &weights, &state, &version); !s.ok()) {
      return s;
    }
    if (absl::Status s = parts_.dense->Restore(t, weights, state, version); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ecps

#include "worker/ps_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {
namespace {

// Per server, per table: positions of rows in a batch's ids (PsClient::Route).
using RowsByServer = std::vector<std::vector<std::vector<int32_t>>>;

// Moves the rows `with_state` names (pulled whole, with their optimizer state) from *route
// to *state_route; (*whole)[t][i]: row i's place among table t's whole rows, -1 for the
// others.
void SplitWholeRows(const UniqueIds& ids, const std::vector<std::vector<int32_t>>& with_state,
                    int servers, RowsByServer* route, RowsByServer* state_route,
                    std::vector<std::vector<int32_t>>* whole) {
  const int tables = static_cast<int>(ids.rows.size());
  state_route->assign(servers, std::vector<std::vector<int32_t>>(tables));
  whole->resize(tables);
  for (int t = 0; t < tables; ++t) {
    std::vector<int32_t>& place = (*whole)[t];
    place.assign(ids.rows[t].size(), -1);
    for (size_t j = 0; j < with_state[t].size(); ++j) {
      place[with_state[t][j]] = static_cast<int32_t>(j);
    }
    for (int s = 0; s < servers; ++s) {
      std::vector<int32_t>& plain = (*route)[s][t];
      auto by_weight = std::stable_partition(plain.begin(), plain.end(),
                                             [&](int32_t i) { return place[i] < 0; });
      (*state_route)[s][t].assign(by_weight, plain.end());
      plain.erase(by_weight, plain.end());
    }
  }
}

// Copies the weights server `s` answered to `req` into their places (`positions`, per table)
// of *rows_data; INTERNAL when a block has the wrong size.
absl::Status CopyWeights(int s, const v1::PullRequest& req, const v1::PullResponse& resp,
                         const std::vector<std::vector<int32_t>>& positions_by_table, int dim,
                         std::vector<std::vector<float>>* rows_data) {
  for (int e = 0; e < req.tables_size(); ++e) {
    int t = req.tables(e).table();
    const std::string& bytes = resp.weights(e);
    const std::vector<int32_t>& positions = positions_by_table[t];
    if (bytes.size() != positions.size() * dim * sizeof(float)) {
      return absl::InternalError("server " + std::to_string(s) + " sent a wrong-sized block");
    }
    const float* src = reinterpret_cast<const float*>(bytes.data());
    for (size_t i = 0; i < positions.size(); ++i) {
      std::memcpy((*rows_data)[t].data() + static_cast<size_t>(positions[i]) * dim, src + i * dim,
                  sizeof(float) * dim);
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct PsClient::Impl {
  std::mutex mu;
  std::vector<std::shared_ptr<v1::ParameterServer::Stub>> stubs;  // guarded by mu
  std::vector<std::string> addresses;                              // guarded by mu
  uint64_t map_version = 0;                                        // guarded by mu
  std::string token;
  std::string sender;
  int rpc_timeout_ms = 10000;
  FailureHandling failures;

  std::shared_ptr<v1::ParameterServer::Stub> Stub(int s, std::string* address = nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    if (address != nullptr) *address = addresses[s];
    return stubs[s];
  }
};

void PsClient::SetFailureHandling(FailureHandling handling) {
  impl_->failures = std::move(handling);
}

void PsClient::Refresh() {
  if (!impl_->failures.map_source) return;
  v1::ClusterMap map = impl_->failures.map_source();
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (map.epoch() < epoch_.load()) return;
  if (map.epoch() > epoch_.load()) epoch_.store(map.epoch());
  for (int s = 0; s < map.servers_size() && s < static_cast<int>(impl_->stubs.size()); ++s) {
    const std::string& address = map.servers(s).address();
    if (address.empty() || address == impl_->addresses[s]) continue;
    impl_->addresses[s] = address;
    impl_->stubs[s] = v1::ParameterServer::NewStub(MakeChannel(address, Role::kServer));
  }
}

RetryPolicy PsClient::FanOutRetry(bool follow_map, int wait_ms) {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(20);
  policy.multiplier = 2;
  policy.max_backoff = std::chrono::milliseconds(500);
  policy.deadline = std::chrono::milliseconds(wait_ms);
  policy.codes = {absl::StatusCode::kUnavailable};
  if (follow_map) {
    policy.codes = {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
                    absl::StatusCode::kCancelled, absl::StatusCode::kFailedPrecondition};
  }
  return policy;
}

// Runs one unary async call per server in parallel and waits for all; retries the calls that
// failed as FanOutRetry says, against the latest cluster map.
template <typename Request, typename Response, typename StartFn>
absl::Status PsClient::FanOut(const std::vector<int>& servers, std::vector<Request>& requests,
                              std::vector<Response>* responses, StartFn start, bool retry_failed) {
  const FailureHandling& fh = impl_->failures;
  const int deadline_ms = impl_->rpc_timeout_ms;
  const bool follow_map = static_cast<bool>(fh.map_source);
  Retrier retrier(FanOutRetry(
      follow_map, follow_map ? std::max(deadline_ms, fh.recovery_wait_ms) : deadline_ms));
  std::vector<int> pending = servers;
  while (true) {
    grpc::CompletionQueue cq;
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<grpc::Status> statuses(pending.size());
    std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<Response>>> calls;
    std::vector<std::string> addresses(pending.size());  // where each call went
    for (size_t i = 0; i < pending.size(); ++i) {
      int s = pending[i];
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                    std::chrono::milliseconds(deadline_ms));
      (*responses)[s].Clear();
      const std::shared_ptr<v1::ParameterServer::Stub> stub = impl_->Stub(s, &addresses[i]);
      calls.push_back(start(stub.get(), contexts.back().get(), requests[s], &cq));
      calls.back()->Finish(&(*responses)[s], &statuses[i], reinterpret_cast<void*>(i));
    }
    for (size_t done = 0; done < pending.size(); ++done) {
      void* tag = nullptr;
      bool ok = false;
      cq.Next(&tag, &ok);
    }
    std::vector<int> retry;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (statuses[i].ok()) continue;
      absl::Status st = FromGrpcStatus(statuses[i]);
      if (retry_failed && retrier.policy().Retries(st) && !retrier.Expired() &&
          !(fh.cancelled && fh.cancelled())) {
        // A server that answered is alive (still initialising, a row not rebuilt yet).
        if (!absl::IsFailedPrecondition(st) && !AnsweredByPeer(st) && fh.on_unavailable) {
          fh.on_unavailable(pending[i], addresses[i]);
        }
        retry.push_back(pending[i]);
        continue;
      }
      return absl::Status(st.code(), "server " + std::to_string(pending[i]) + ": " +
                                         std::string(st.message()));
    }
    if (retry.empty()) return absl::OkStatus();
    pending = std::move(retry);
    // Back off, but retry at once when a new cluster map arrives (a replacement took over).
    if (follow_map) {
      retrier.WaitOrWake([&] { return fh.map_source().epoch() > epoch_.load(); },
                         std::chrono::milliseconds(5));
    } else {
      retrier.Wait();
    }
    Refresh();
    for (int s : pending) requests[s].mutable_header()->set_epoch(epoch_.load());
  }
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const v1::ClusterMap& map, std::vector<int64_t> table_rows, int dim,
    std::vector<int64_t> dense_sizes, std::string token, std::string sender,
    int rpc_timeout_ms) {
  int k = map.k() > 0 ? map.k() : 1;
  auto placement = Placement::Create(map.servers_size(), k, map.r(), std::move(table_rows));
  if (!placement.ok()) return placement.status();
  auto impl = std::make_unique<Impl>();
  for (const v1::NodeInfo& server : map.servers()) {
    if (server.address().empty()) {
      return absl::FailedPreconditionError("server " + std::to_string(server.id()) +
                                           " has no address in the cluster map");
    }
    impl->addresses.push_back(server.address());
    impl->stubs.push_back(v1::ParameterServer::NewStub(MakeChannel(server.address(), Role::kServer)));
  }
  impl->token = std::move(token);
  impl->sender = std::move(sender);
  impl->rpc_timeout_ms = rpc_timeout_ms;
  std::unique_ptr<PsClient> client(
      new PsClient(std::move(*placement), dim, std::move(dense_sizes), std::move(impl)));
  client->epoch_.store(map.epoch());
  return client;
}

PsClient::PsClient(Placement placement, int dim, std::vector<int64_t> dense_sizes,
                   std::unique_ptr<Impl> impl)
    : placement_(std::move(placement)),
      dim_(dim),
      dense_sizes_(std::move(dense_sizes)),
      impl_(std::move(impl)) {}

PsClient::~PsClient() = default;

PsClient::Route PsClient::RouteRows(const UniqueIds& ids) const {
  const int tables = static_cast<int>(ids.rows.size());
  Route route(placement_.servers(), std::vector<std::vector<int32_t>>(tables));
  for (int t = 0; t < tables; ++t) {
    for (size_t i = 0; i < ids.rows[t].size(); ++i) {
      route[placement_.DataLocation(t, ids.rows[t][i]).server][t].push_back(
          static_cast<int32_t>(i));
    }
  }
  return route;
}

void PsClient::BuildPulls(const UniqueIds& ids, const Route& route, const Route& state_route,
                          std::vector<v1::PullRequest>* requests, std::vector<int>* targets) {
  const int servers = placement_.servers();
  const int tables = static_cast<int>(ids.rows.size());
  requests->assign(servers, v1::PullRequest());
  for (int s = 0; s < servers; ++s) {
    bool any = false;
    for (int t = 0; t < tables; ++t) {
      if (!route[s][t].empty()) {
        v1::TableRows* tr = (*requests)[s].add_tables();
        tr->set_table(t);
        for (int32_t i : route[s][t]) tr->add_rows(ids.rows[t][i]);
      }
      if (!state_route.empty() && !state_route[s][t].empty()) {
        v1::TableRows* tr = (*requests)[s].add_with_state();
        tr->set_table(t);
        for (int32_t i : state_route[s][t]) tr->add_rows(ids.rows[t][i]);
      }
      any |= !route[s][t].empty() || (!state_route.empty() && !state_route[s][t].empty());
    }
    if (!any) continue;
    FillHeader((*requests)[s].mutable_header(), impl_->token, epoch_.load(), impl_->sender);
    targets->push_back(s);
  }
}

void PsClient::PrefetchRows(const UniqueIds& ids) {
  if (!impl_->failures.map_source) return;
  const v1::ClusterMap map = impl_->failures.map_source();
  if (map.phase() != v1::JOB_RECOVERING) return;
  const int servers = placement_.servers();
  std::vector<uint8_t> is_recovering(servers, 0);
  for (int s = 0; s < servers && s < map.servers_size(); ++s) {
    is_recovering[s] = map.servers(s).state() == v1::NODE_RECOVERING ? 1 : 0;
  }
  // Only the recovering servers get a hint, so only their rows are gathered (RouteRows and
  // BuildPulls would build every server's request).
  std::vector<v1::PullRequest> requests(servers);
  std::vector<v1::TableRows*> table_rows(servers);
  for (int t = 0; t < static_cast<int>(ids.rows.size()); ++t) {
    std::fill(table_rows.begin(), table_rows.end(), nullptr);
    for (int64_t row : ids.rows[t]) {
      const int s = placement_.DataLocation(t, row).server;
      if (!is_recovering[s]) continue;
      if (table_rows[s] == nullptr) {
        table_rows[s] = requests[s].add_tables();
        table_rows[s]->set_table(t);
      }
      table_rows[s]->add_rows(row);
    }
  }
  std::vector<int> recovering;
  for (int s = 0; s < servers; ++s) {
    if (requests[s].tables_size() == 0) continue;
    FillHeader(requests[s].mutable_header(), impl_->token, epoch_.load(), impl_->sender);
    requests[s].set_prefetch(true);
    recovering.push_back(s);
  }
  if (recovering.empty()) return;
  std::vector<v1::PullResponse> responses(servers);
  // A hint: one try, and whatever fails is left to the pull that follows.
  FanOut(
      recovering, requests, &responses,
      [&](v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx, const v1::PullRequest& req,
          grpc::CompletionQueue* cq) { return stub->AsyncPull(ctx, req, cq); },
      /*retry=*/false)
      .IgnoreError();
}

absl::Status PsClient::PullRows(const UniqueIds& ids, std::vector<std::vector<float>>* rows_data) {
  int payload_floats = 0;
  return PullRowsWithState(ids, {}, rows_data, nullptr, &payload_floats);
}

absl::Status PsClient::PullRowsWithState(const UniqueIds& ids, const StatePositions& with_state,
                                         std::vector<std::vector<float>>* rows_data,
                                         std::vector<std::vector<float>>* payloads,
                                         int* payload_floats) {
  const int servers = placement_.servers();
  const int tables = static_cast<int>(ids.rows.size());
  Route route = RouteRows(ids);
  // The rows pulled whole leave `route` for `state_route`; whole[t][i]: row i's place among
  // table t's whole rows, -1 for the others.
  Route state_route;
  std::vector<std::vector<int32_t>> whole;
  if (!with_state.empty()) {
    SplitWholeRows(ids, with_state, servers, &route, &state_route, &whole);
  }
  std::vector<v1::PullRequest> requests;
  std::vector<int> targets;
  BuildPulls(ids, route, state_route, &requests, &targets);
  std::vector<v1::PullResponse> responses(servers);
  absl::Status status = FanOut(
      targets, requests, &responses,
      [&](v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx, const v1::PullRequest& req,
          grpc::CompletionQueue* cq) { return stub->AsyncPull(ctx, req, cq); });
  if (!status.ok()) return status;
  rows_data->resize(tables);
  for (int t = 0; t < tables; ++t) (*rows_data)[t].resize(ids.rows[t].size() * dim_);
  *payload_floats = 0;
  if (payloads != nullptr) payloads->assign(tables, {});
  for (int s : targets) {
    const v1::PullRequest& req = requests[s];
    const v1::PullResponse& resp = responses[s];
    if (resp.weights_size() != req.tables_size() ||
        resp.payloads_size() != req.with_state_size()) {
      return absl::InternalError(
          "server " + std::to_string(s) + " answered " + std::to_string(resp.weights_size()) +
          " and " + std::to_string(resp.payloads_size()) + " tables for " +
          std::to_string(req.tables_size()) + " and " + std::to_string(req.with_state_size()));
    }
    if (absl::Status copied = CopyWeights(s, req, resp, route[s], dim_, rows_data); !copied.ok()) {
      return copied;
    }
    if (req.with_state_size() == 0) continue;
    const int pf = resp.payload_floats();
    if (pf < dim_ || (*payload_floats != 0 && pf != *payload_floats)) {
      return absl::InternalError("server " + std::to_string(s) + " sent payloads of " +
                                 std::to_string(pf) + " floats (embedding_dim " +
                                 std::to_string(dim_) + ")");
    }
    *payload_floats = pf;
    for (int e = 0; e < req.with_state_size(); ++e) {
      int t = req.with_state(e).table();
      const std::string& bytes = resp.payloads(e);
      const std::vector<int32_t>& positions = state_route[s][t];
      if (bytes.size() != positions.size() * pf * sizeof(float)) {
        return absl::InternalError("server " + std::to_string(s) + " sent a wrong-sized block");
      }
      std::vector<float>& out = (*payloads)[t];
      out.resize(with_state[t].size() * pf);
      const float* src = reinterpret_cast<const float*>(bytes.data());
      for (size_t i = 0; i < positions.size(); ++i) {
        std::memcpy(out.data() + static_cast<size_t>(whole[t][positions[i]]) * pf, src + i * pf,
                    sizeof(float) * pf);
        std::memcpy((*rows_data)[t].data() + static_cast<size_t>(positions[i]) * dim_,
                    src + i * pf, sizeof(float) * dim_);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::Push(const UniqueIds& ids, const std::vector<std::vector<float>>& grads,
                            const std::vector<std::vector<float>>& dense_grads) {
  const int servers = placement_.servers();
  const int tables = static_cast<int>(ids.rows.size());
  const Route route = RouteRows(ids);
  std::vector<v1::PushRequest> sparse(servers);
  std::vector<v1::PushDenseRequest> dense(servers);
  std::vector<int> sparse_targets, dense_targets;
  for (int s = 0; s < servers; ++s) {
    for (int t = 0; t < tables; ++t) {
      if (route[s][t].empty()) continue;
      v1::TableRows* tr = sparse[s].add_tables();
      tr->set_table(t);
      std::string* g = sparse[s].add_grads();
      g->resize(route[s][t].size() * dim_ * sizeof(float));
      float* dst = reinterpret_cast<float*>(g->data());
      for (size_t i = 0; i < route[s][t].size(); ++i) {
        int32_t pos = route[s][t][i];
        tr->add_rows(ids.rows[t][pos]);
        std::memcpy(dst + i * dim_, grads[t].data() + static_cast<size_t>(pos) * dim_,
                    sizeof(float) * dim_);
      }
    }
    if (sparse[s].tables_size() > 0) {
      FillHeader(sparse[s].mutable_header(), impl_->token, epoch_.load(), impl_->sender);
      sparse_targets.push_back(s);
    }
  }
  for (size_t i = 0; i < dense_grads.size(); ++i) {
    int s = static_cast<int>(i % servers);
    dense[s].add_tensors(static_cast<int>(i));
    dense[s].add_grads()->assign(reinterpret_cast<const char*>(dense_grads[i].data()),
                                 dense_grads[i].size() * sizeof(float));
  }
  for (int s = 0; s < servers; ++s) {
    if (dense[s].tensors_size() == 0) continue;
    FillHeader(dense[s].mutable_header(), impl_->token, epoch_.load(), impl_->sender);
    dense_targets.push_back(s);
  }
  // Sparse and dense pushes go out together: dense pushes run on a helper thread.
  absl::Status dense_status;
  std::thread dense_thread([&] {
    std::vector<v1::PushDenseResponse> responses(servers);
    dense_status = FanOut(dense_targets, dense, &responses,
                          [&](v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx,
                              const v1::PushDenseRequest& req, grpc::CompletionQueue* cq) {
                            return stub->AsyncPushDense(ctx, req, cq);
                          });
  });
  std::vector<v1::PushResponse> responses(servers);
  absl::Status status = FanOut(
      sparse_targets, sparse, &responses,
      [&](v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx, const v1::PushRequest& req,
          grpc::CompletionQueue* cq) { return stub->AsyncPush(ctx, req, cq); });
  dense_thread.join();
  return status.ok() ? dense_status : status;
}

absl::Status PsClient::PullDense(std::vector<std::vector<float>>* tensors,
                                 std::vector<std::vector<float>>* states,
                                 std::vector<int64_t>* versions,
                                 const std::vector<int64_t>* held, std::vector<char>* as_held) {
  const bool since =
      states != nullptr && versions != nullptr && held != nullptr && as_held != nullptr;
  if (since && held->size() != dense_sizes_.size()) {
    return absl::InternalError("dense pull holding " + std::to_string(held->size()) +
                               " versions of " + std::to_string(dense_sizes_.size()) +
                               " tensors");
  }
  const int servers = placement_.servers();
  std::vector<v1::PullDenseRequest> requests(servers);
  std::vector<int> targets;
  for (size_t i = 0; i < dense_sizes_.size(); ++i) {
    requests[i % servers].add_tensors(static_cast<int>(i));
  }
  for (int s = 0; s < servers; ++s) {
    if (requests[s].tensors_size() == 0) continue;
    requests[s].set_with_state(states != nullptr);
    if (since) {
      for (int i : requests[s].tensors()) requests[s].add_held_versions((*held)[i]);
    }
    FillHeader(requests[s].mutable_header(), impl_->token, epoch_.load(), impl_->sender);
    targets.push_back(s);
  }
  std::vector<v1::PullDenseResponse> responses(servers);
  absl::Status status = FanOut(targets, requests, &responses,
                               [&](v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx,
                                   const v1::PullDenseRequest& req, grpc::CompletionQueue* cq) {
                                 return stub->AsyncPullDense(ctx, req, cq);
                               });
  if (!status.ok()) return status;
  tensors->resize(dense_sizes_.size());
  if (states != nullptr) states->resize(dense_sizes_.size());
  if (versions != nullptr) versions->resize(dense_sizes_.size());
  if (since) as_held->assign(dense_sizes_.size(), 0);
  for (int s : targets) {
    const v1::PullDenseResponse& resp = responses[s];
    const int n = requests[s].tensors_size();
    if (resp.values_size() != n || resp.versions_size() != n ||
        (states != nullptr && resp.states_size() != n)) {
      return absl::InternalError("server " + std::to_string(s) + " answered a dense pull of " +
                                 std::to_string(n) + " tensors with " +
                                 std::to_string(resp.values_size()));
    }
    for (int e = 0; e < n; ++e) {
      int i = requests[s].tensors(e);
      const std::string& bytes = resp.values(e);
      if (since && bytes.empty() && resp.states(e).empty() && resp.versions(e) == (*held)[i]) {
        (*versions)[i] = resp.versions(e);
        (*as_held)[i] = 1;
        continue;
      }
      if (static_cast<int64_t>(bytes.size()) != dense_sizes_[i] * 4) {
        return absl::InternalError("dense tensor " + std::to_string(i) + " has a wrong size");
      }
      (*tensors)[i].resize(dense_sizes_[i]);
      std::memcpy((*tensors)[i].data(), bytes.data(), bytes.size());
      if (versions != nullptr) (*versions)[i] = resp.versions(e);
      if (states == nullptr) continue;
      const std::string& state = resp.states(e);
      if (state.size() % sizeof(float) != 0) {
        return absl::InternalError("dense tensor " + std::to_string(i) + "'s state has " +
                                   std::to_string(state.size()) + " bytes");
      }
      (*states)[i].resize(state.size() / sizeof(float));
      // An optimizer without state (sgd) sends none: no copy from or into a null pointer.
      if (!state.empty()) std::memcpy((*states)[i].data(), state.data(), state.size());
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::ReadPayloads(int table, const std::vector<int64_t>& rows,
                                    std::vector<float>* out, int* payload_floats) {
  const int servers = placement_.servers();
  std::vector<v1::ReadRowsRequest> requests(servers);
  std::vector<std::vector<size_t>> positions(servers);
  for (size_t i = 0; i < rows.size(); ++i) {
    int s = placement_.DataLocation(table, rows[i]).server;
    requests[s].mutable_rows()->set_table(table);
    requests[s].mutable_rows()->add_rows(rows[i]);
    positions[s].push_back(i);
  }
  std::vector<int> targets;
  for (int s = 0; s < servers; ++s) {
    if (positions[s].empty()) continue;
    FillHeader(requests[s].mutable_header(), impl_->token, epoch_.load(), impl_->sender);
    targets.push_back(s);
  }
  std::vector<v1::ReadRowsResponse> responses(servers);
  absl::Status status = FanOut(
      targets, requests, &responses,
      [&](v1::ParameterServer::Stub* stub, grpc::ClientContext* ctx, const v1::ReadRowsRequest& req,
          grpc::CompletionQueue* cq) { return stub->AsyncReadRows(ctx, req, cq); });
  if (!status.ok()) return status;
  int pf = 0;
  for (int s : targets) pf = responses[s].payload_floats();
  *payload_floats = pf;
  out->assign(rows.size() * pf, 0.0f);
  for (int s : targets) {
    const float* src = reinterpret_cast<const float*>(responses[s].payloads().data());
    for (size_t i = 0; i < positions[s].size(); ++i) {
      std::memcpy(out->data() + positions[s][i] * pf, src + i * pf, sizeof(float) * pf);
    }
  }
  return absl::OkStatus();
}

}  // namespace ecps

#include "ps/parameter_server.h"

#include <cstring>
#include <string>
#include <vector>

#include "proto/ecps.pb.h"

namespace ecps {
namespace {

absl::Span<const int64_t> RowsOf(const v1::TableRows& t) {
  return absl::MakeConstSpan(t.rows().data(), t.rows().size());
}

}  // namespace

void ParameterServerCore::Install(std::unique_ptr<EmbeddingStore> embeddings,
                                  std::unique_ptr<DenseStore> dense) {
  embeddings_ = std::move(embeddings);
  dense_ = std::move(dense);
  ready_.store(true, std::memory_order_release);
}

absl::Status ParameterServerCore::CheckRequest(const v1::RequestHeader& header) const {
  if (header.token() != token_) {
    return absl::UnauthenticatedError("wrong or missing job token");
  }
  if (header.epoch() < epoch()) {
    return absl::FailedPreconditionError("stale epoch " + std::to_string(header.epoch()) +
                                         " < " + std::to_string(epoch()) + " from " +
                                         header.sender());
  }
  if (!ready()) return absl::UnavailableError("server is still initialising its tables");
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Pull(const v1::PullRequest& request,
                                       v1::PullResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  const int dim = embeddings_->dim();
  for (const v1::TableRows& t : request.tables()) {
    if (absl::Status s = embeddings_->Validate(t.table(), RowsOf(t)); !s.ok()) return s;
  }
  for (const v1::TableRows& t : request.tables()) {
    std::string* bytes = response->add_weights();
    bytes->resize(sizeof(float) * dim * t.rows_size());
    absl::Status s = embeddings_->Pull(t.table(), RowsOf(t), reinterpret_cast<float*>(bytes->data()));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Push(const v1::PushRequest& request) {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  const int dim = embeddings_->dim();
  if (request.grads_size() != request.tables_size()) {
    return absl::InvalidArgumentError("push has " + std::to_string(request.tables_size()) +
                                      " tables but " + std::to_string(request.grads_size()) +
                                      " gradient blocks");
  }
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
    if (absl::Status s = embeddings_->Validate(t.table(), RowsOf(t)); !s.ok()) return s;
  }
  std::vector<float> grads;
  for (int i = 0; i < request.tables_size(); ++i) {
    const v1::TableRows& t = request.tables(i);
    grads.resize(static_cast<size_t>(dim) * t.rows_size());
    std::memcpy(grads.data(), request.grads(i).data(), request.grads(i).size());
    absl::Status s = embeddings_->Push(t.table(), RowsOf(t), grads.data());
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::PullDense(const v1::PullDenseRequest& request,
                                            v1::PullDenseResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  for (int tensor : request.tensors()) {
    if (absl::Status s = dense_->Check(tensor, -1); !s.ok()) return s;
  }
  std::vector<float> values;
  for (int tensor : request.tensors()) {
    int64_t version = 0;
    if (absl::Status s = dense_->Read(tensor, &values, &version); !s.ok()) return s;
    response->add_values()->assign(reinterpret_cast<const char*>(values.data()),
                                   values.size() * sizeof(float));
    response->add_versions(version);
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
    absl::Status s = dense_->Check(request.tensors(i), static_cast<int64_t>(g.size() / sizeof(float)));
    if (!s.ok()) return s;
  }
  std::vector<float> grad;
  for (int i = 0; i < request.tensors_size(); ++i) {
    const std::string& g = request.grads(i);
    grad.resize(g.size() / sizeof(float));
    std::memcpy(grad.data(), g.data(), g.size());
    absl::Status s = dense_->Apply(request.tensors(i), grad.data(), static_cast<int64_t>(grad.size()));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::ReadRows(const v1::ReadRowsRequest& request,
                                           v1::ReadRowsResponse* response) const {
  if (absl::Status s = CheckRequest(request.header()); !s.ok()) return s;
  const v1::TableRows& t = request.rows();
  if (absl::Status s = embeddings_->Validate(t.table(), RowsOf(t)); !s.ok()) return s;
  const int pf = embeddings_->payload_floats();
  std::string* bytes = response->mutable_payloads();
  bytes->resize(sizeof(float) * pf * t.rows_size());
  response->set_payload_floats(pf);
  return embeddings_->ReadPayloads(t.table(), RowsOf(t), reinterpret_cast<float*>(bytes->data()));
}

absl::Status ParameterServerCore::Health(const v1::RequestHeader& header,
                                         v1::HealthResponse* response) const {
  if (header.token() != token_) return absl::UnauthenticatedError("wrong or missing job token");
  response->set_state(ready() ? v1::NODE_ACTIVE : v1::NODE_STARTING);
  response->set_epoch(epoch());
  FillStats(response->mutable_stats());
  return absl::OkStatus();
}

void ParameterServerCore::FillStats(v1::ServerStats* stats) const {
  if (!ready()) return;
  stats->set_data_rows(embeddings_->data_rows());
  stats->set_bytes(embeddings_->bytes() + dense_->bytes());
  stats->set_pulls(embeddings_->pulls());
  stats->set_pushes(embeddings_->pushes());
  stats->set_dense_tensors(dense_->owned_tensors());
}

}  // namespace ecps

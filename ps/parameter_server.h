// The parameter server's request handlers, apart from any transport (STYLE: the gRPC glue in
// server_main.cc only adapts this class). Thread-safe.
//
// Every handler first checks the request header (token: UNAUTHENTICATED; epoch older than
// the server's: FAILED_PRECONDITION), then validates the whole request (tables, row ids,
// ownership, sizes: INVALID_ARGUMENT), and only then changes state, so a bad request changes
// nothing. Before Install() every data request gets UNAVAILABLE (still initialising).
#ifndef ECPS_PS_PARAMETER_SERVER_H_
#define ECPS_PS_PARAMETER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "ps/dense_store.h"
#include "ps/embedding_store.h"

namespace ecps {
namespace v1 {
class PullRequest;
class PullResponse;
class PushRequest;
class PullDenseRequest;
class PullDenseResponse;
class PushDenseRequest;
class ReadRowsRequest;
class ReadRowsResponse;
class HealthResponse;
class RequestHeader;
class ServerStats;
}  // namespace v1

class ParameterServerCore {
 public:
  explicit ParameterServerCore(std::string token) : token_(std::move(token)) {}

  // Makes the server ready with its initialised stores (called once).
  void Install(std::unique_ptr<EmbeddingStore> embeddings, std::unique_ptr<DenseStore> dense);
  bool ready() const { return ready_.load(std::memory_order_acquire); }

  // Requests from an epoch older than this are refused (fencing).
  void SetEpoch(uint64_t epoch) { epoch_.store(epoch, std::memory_order_release); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

  absl::Status Pull(const v1::PullRequest& request, v1::PullResponse* response) const;
  absl::Status Push(const v1::PushRequest& request);
  absl::Status PullDense(const v1::PullDenseRequest& request,
                         v1::PullDenseResponse* response) const;
  absl::Status PushDense(const v1::PushDenseRequest& request);
  absl::Status ReadRows(const v1::ReadRowsRequest& request, v1::ReadRowsResponse* response) const;
  absl::Status Health(const v1::RequestHeader& header, v1::HealthResponse* response) const;

  void FillStats(v1::ServerStats* stats) const;

 private:
  absl::Status CheckRequest(const v1::RequestHeader& header) const;

  const std::string token_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> ready_{false};
  std::unique_ptr<EmbeddingStore> embeddings_;
  std::unique_ptr<DenseStore> dense_;
};

}  // namespace ecps

#endif  // ECPS_PS_PARAMETER_SERVER_H_

// The worker's view of the parameter servers: routes rows and dense tensors to the servers
// that hold them (domain/placement.h), and fans requests out to all servers in parallel.
//
// Thread-safe: the worker prefetches the next batch while it pushes this one. Errors
// (FanOutRetry): UNAVAILABLE is retried with backoff within the RPC deadline; with failure
// handling set (SetFailureHandling) also DEADLINE_EXCEEDED, CANCELLED and FAILED_PRECONDITION,
// within the recovery wait; any other error is returned at once.
#ifndef ECPS_WORKER_PS_CLIENT_H_
#define ECPS_WORKER_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "domain/placement.h"
#include "runtime/retry_policy.h"
#include "worker/step.h"

namespace ecps {
namespace v1 {
class ClusterMap;
class PullRequest;
}

class PsClient {
 public:
  // `map` gives the servers' addresses; the code (k, r) it names decides placement.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(const v1::ClusterMap& map,
                                                          std::vector<int64_t> table_rows,
                                                          int dim,
                                                          std::vector<int64_t> dense_sizes,
                                                          std::string token,
                                                          std::string sender,
                                                          int rpc_timeout_ms);
  ~PsClient();

  // Pulls the weights of every unique row; rows_data[t] gets rows[t].size() * dim floats.
  absl::Status PullRows(const UniqueIds& ids, std::vector<std::vector<float>>* rows_data);
  // Rows pulled whole: per table, positions in ids.rows[t], ascending.
  using StatePositions = std::vector<std::vector<int32_t>>;
  // PullRows, and for the rows at `with_state` the whole payloads too (weights, then the
  // sparse optimizer's state, each row's read atomically on its server): (*payloads)[t]
  // gets with_state[t].size() * *payload_floats floats, in with_state[t] order, and those
  // rows' weights also land in rows_data. In one request per server with the other rows.
  absl::Status PullRowsWithState(const UniqueIds& ids, const StatePositions& with_state,
                                 std::vector<std::vector<float>>* rows_data,
                                 std::vector<std::vector<float>>* payloads, int* payload_floats);
  // While a server is RECOVERING (per the cluster map of the failure handling), tells it which
  // of its rows `ids` will pull soon, so that it rebuilds the lost ones ahead of the pull; one
  // try, errors ignored. Does nothing otherwise.
  void PrefetchRows(const UniqueIds& ids);
  // Pushes summed row gradients (grads[t]: rows[t].size() * dim) and, when `dense_grads` is
  // not empty, one gradient per dense tensor. Both travel in parallel.
  absl::Status Push(const UniqueIds& ids, const std::vector<std::vector<float>>& grads,
                    const std::vector<std::vector<float>>& dense_grads);
  // Pulls every dense tensor from its primary. With `states` also each tensor's optimizer
  // state (DenseStateFloats floats) and with `versions` its count of updates, each tensor's
  // weights, state and version read together under its lock. With `states`, `held` (one
  // version per tensor, -1: none) and `as_held`: a tensor its server still holds at held[i]
  // is not sent again; its (*tensors)[i] and (*states)[i] are left as they are and
  // (*as_held)[i] set to 1 (else 0), for the caller to take them from its own copy.
  absl::Status PullDense(std::vector<std::vector<float>>* tensors,
                         std::vector<std::vector<float>>* states = nullptr,
                         std::vector<int64_t>* versions = nullptr,
                         const std::vector<int64_t>* held = nullptr,
                         std::vector<char>* as_held = nullptr);
  // Reads whole payloads (weights + optimizer state) of rows of one table (admin / tests).
  absl::Status ReadPayloads(int table, const std::vector<int64_t>& rows, std::vector<float>* out,
                            int* payload_floats);

  const Placement& placement() const { return placement_; }

  // Following the cluster through failures: `map_source` returns the latest cluster map (the
  // coordinator client's watcher); after a call that failed as FanOutRetry retries, the client
  // re-reads the map (a replacement's address, the new epoch) and retries until
  // `recovery_wait_ms` has passed or `cancelled()` returns true. For a server that did not
  // answer (not FAILED_PRECONDITION, not an error an ecps handler returned) it first calls
  // `on_unavailable(server, address)` with the address the failed call went to (the worker
  // reports it to the coordinator).
  struct FailureHandling {
    std::function<v1::ClusterMap()> map_source;
    std::function<void(int server, const std::string& address)> on_unavailable;
    std::function<bool()> cancelled;
    int recovery_wait_ms = 120000;
  };
  void SetFailureHandling(FailureHandling handling);

  // The epoch this client stamps on its requests.
  uint64_t epoch() const { return epoch_.load(); }

 private:
  struct Impl;
  PsClient(Placement placement, int dim, std::vector<int64_t> dense_sizes,
           std::unique_ptr<Impl> impl);

  // For each server, for each table, the positions in ids.rows[table] of the rows it holds.
  using Route = std::vector<std::vector<std::vector<int32_t>>>;
  Route RouteRows(const UniqueIds& ids) const;
  // Re-reads the map: new addresses and a newer epoch. Thread-safe.
  void Refresh();
  // How FanOut retries a call that failed: 20 ms doubling to 500 ms, for `wait_ms` in all;
  // UNAVAILABLE, and when it follows the cluster map (`follow_map`: failure handling set) also
  // DEADLINE_EXCEEDED, CANCELLED (a server dead or stopping) and FAILED_PRECONDITION (a stale
  // epoch, a fenced server, a peer's refusal that a newer map resolves). A new map ends the
  // wait at once.
  static RetryPolicy FanOutRetry(bool follow_map, int wait_ms);
  // retry_failed=false: one try per server (the first failure is returned).
  template <typename Request, typename Response, typename StartFn>
  absl::Status FanOut(const std::vector<int>& servers, std::vector<Request>& requests,
                      std::vector<Response>* responses, StartFn start, bool retry_failed = true);
  // The pull requests of `ids` (one per server holding any; their ids into *targets): the
  // rows of `route` by weight, those of `state_route` whole.
  void BuildPulls(const UniqueIds& ids, const Route& route, const Route& state_route,
                  std::vector<v1::PullRequest>* requests, std::vector<int>* targets);

  Placement placement_;
  const int dim_;
  const std::vector<int64_t> dense_sizes_;
  std::atomic<uint64_t> epoch_{0};
  std::unique_ptr<Impl> impl_;
};

}  // namespace ecps

#endif  // ECPS_WORKER_PS_CLIENT_H_

// The client side of the Coordinator service, shared by servers and workers: registration
// (retried while the coordinator is still starting), heartbeats, failure reports, and a
// background watcher that keeps the latest cluster map. Thread-safe.
#ifndef ECPS_RUNTIME_COORDINATOR_CLIENT_H_
#define ECPS_RUNTIME_COORDINATOR_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/coordinator_finder.h"
#include "runtime/coordinator_link.h"
#include "runtime/coordinator_term.h"
#include "runtime/rpc.h"

namespace ecps {

// A string that tells this process incarnation apart from any other: pid@host:start-ns.
std::string MakeInstanceId();

// Whether a role holding `held` takes `offered` instead: one of a later coordinator term
// always (a takeover), one of an earlier term never (a deposed coordinator's), and within a
// term one of the same or a later epoch.
bool NewerMap(const v1::ClusterMap& held, const v1::ClusterMap& offered);

class CoordinatorClient : public CoordinatorLink {
 public:
  // `address_file`: empty, or the file a relaunched coordinator writes its address into
  // (coordinator_finder.h); every call that finds no coordinator reads it again and, when it
  // names another address, dials that one from then on.
  CoordinatorClient(const std::string& address, std::string token, std::string sender,
                    int rpc_timeout_ms, std::string address_file = "");
  ~CoordinatorClient() override;

  // Registers; while the coordinator does not answer (not started yet, its name not
  // resolvable yet), retries with backoff for up to `wait_ms`, logging what it waits for.
  absl::StatusOr<v1::RegisterResponse> Register(v1::Role role, const std::string& address,
                                                int requested_id, const std::string& instance,
                                                int wait_ms = 30000) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) override;
  // `address`: the address the caller failed to reach, or empty (see ReportFailureRequest).
  absl::Status ReportFailure(v1::Role role, int id, const std::string& reason,
                             const std::string& address = "");
  // Reports parameter server `id` unreachable at `address`, at most once a second per server
  // and address (callers see every failed RPC); errors are ignored: heartbeats remain the
  // backstop.
  void ReportServerUnreachable(int id, const std::string& reason,
                               const std::string& address) override;
  absl::StatusOr<v1::StatusResponse> Status();
  // The admin drill: the node holding (role, id) kills itself at its next heartbeat.
  absl::Status Kill(v1::Role role, int id);

  // Starts a background stream that keeps the latest cluster map (reconnecting on errors).
  void StartWatch();
  // The latest map seen (epoch 0 before the first).
  v1::ClusterMap map() const override;
  // Waits until `ready(map)` holds or `timeout_ms` passes; returns the map that satisfied it.
  absl::StatusOr<v1::ClusterMap> WaitForMap(const std::function<bool(const v1::ClusterMap&)>& ready,
                                            int timeout_ms) override;

  // Sent with Register: where this role serves /metrics (host:port; empty: nowhere).
  void set_metrics_address(std::string address) { metrics_address_ = std::move(address); }

  // The address dialled now.
  std::string address() const;
  const std::string& token() const { return token_; }
  const std::string& sender() const { return sender_; }
  uint64_t epoch() const override;

 private:
  void WatchLoop();
  // Keeps `map` unless it is older than the one held: a deposed coordinator's (a lower term
  // than the highest seen) is ignored, one of a newer term replaces the held one, and within
  // a term the later epoch wins.
  void TakeMapLocked(const v1::ClusterMap& map);
  std::shared_ptr<v1::Coordinator::Stub> stub() const;
  // After a call that found no coordinator (UNAVAILABLE, DEADLINE_EXCEEDED): reads the
  // address file again and dials the address it names when that moved. Returns whether it
  // moved.
  bool FindMoved(const absl::Status& failed);

  mutable std::mutex dial_mu_;
  CoordinatorFinder finder_;                     // guarded by dial_mu_
  std::shared_ptr<v1::Coordinator::Stub> stub_;  // guarded by dial_mu_
  const std::string token_;
  const std::string sender_;
  const int rpc_timeout_ms_;
  std::string metrics_address_;
  CoordinatorTermFence term_fence_;  // heartbeat answers' and maps'

  mutable std::mutex mu_;
  std::condition_variable changed_;
  v1::ClusterMap map_;
  // guarded by mu_
  std::map<std::pair<int, std::string>, std::chrono::steady_clock::time_point> last_report_;
  bool stopping_ = false;
  grpc::ClientContext* watch_context_ = nullptr;  // guarded by mu_
  std::thread watcher_;
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_COORDINATOR_CLIENT_H_

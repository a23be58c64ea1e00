// The client side of the Coordinator service, shared by servers and workers: registration
// (retried while the coordinator is still starting), heartbeats, failure reports, and a
// background watcher that keeps the latest cluster map. Thread-safe.
#ifndef ECPS_RUNTIME_COORDINATOR_CLIENT_H_
#define ECPS_RUNTIME_COORDINATOR_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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

// Which coordinator a role calls (docs/recovery.md, "Standby coordinators" and "A coordinator
// that moves"). The client holds a list of candidate addresses: `address` is the
// coordinator's host:port or, with standby coordinators (coordinator.replicas), every
// coordinator's, comma-separated. Calls go to the current candidate. When one finds nobody
// there (UNAVAILABLE, DEADLINE_EXCEEDED: a standby does not listen, the active one died) or
// is answered with a lower term than seen (a deposed coordinator), the client moves on:
//   1. with an address file, it reads the file again; when the file names another address
//      than it named last (a coordinator that took over or was relaunched wrote it), that
//      one becomes current: its entry when the list has it, else it takes the place of the
//      candidate that failed;
//   2. otherwise, to the next candidate of the list (with one address and no file, nothing
//      moves: the role keeps dialling it, as gRPC reconnects).
// Each move is logged on one line (moving along the list: one line per outage, until some
// coordinator answers). Whichever coordinator leads answers; the term fence keeps a deposed
// one's answers and maps out.
class CoordinatorClient : public CoordinatorLink {
 public:
  // `address_file`: empty, or the file a coordinator writes its address into once it serves
  // (--address-file; coordinator_finder.h).
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

  // The candidate calls go to now.
  std::string address() const;
  const std::string& token() const { return token_; }
  const std::string& sender() const { return sender_; }
  uint64_t epoch() const override;

 private:
  void WatchLoop();
  // Keeps `map` unless it is older than the one held: a deposed coordinator's (a lower term
  // than the highest seen) is ignored, one of a newer term replaces the held one, and within
  // a term the later epoch wins.
  void TakeMapLocked(const v1::ClusterMap& map) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whom a call goes to: the current candidate's index, address, channel and stub (which the
  // call keeps alive should the candidate be replaced meanwhile), and whether there are
  // several candidates.
  struct Dial {
    size_t index = 0;
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<v1::Coordinator::Stub> stub;
    bool several = false;
  };
  Dial Current() const;
  // Calls `call` on the current candidate and moves on when nobody answers there. With
  // several candidates, first awaits its connection (up to a second) so that a standby that
  // has just started to listen is found; a connection that fails counts as no answer.
  // `dialled`: where the index of the candidate called is stored (may be null).
  grpc::Status CallCurrent(const std::function<grpc::Status(v1::Coordinator::Stub*)>& call,
                           size_t* dialled = nullptr);
  // Candidate `index` did not answer or is deposed (`why`, for the log): moves on as the class
  // comment says, unless another call moved on from it already. Returns whether calls now go
  // elsewhere.
  bool MoveOn(size_t index, const std::string& why);
  // The candidates, comma-separated, for messages.
  std::string CandidatesText() const;
  // How many moves there were so far: a caller compares before and after its call.
  uint64_t Moves() const;
  // Puts `address` at candidate `index`, with a new channel.
  void DialLocked(size_t index, const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dial_mu_);

  mutable absl::Mutex dial_mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(dial_mu_);  // the candidates
  std::vector<std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(dial_mu_);
  std::vector<std::shared_ptr<v1::Coordinator::Stub>> stubs_ ABSL_GUARDED_BY(dial_mu_);
  size_t current_ ABSL_GUARDED_BY(dial_mu_) = 0;
  // Counts moves, so that a caller sees whether one happened during its call.
  uint64_t moves_ ABSL_GUARDED_BY(dial_mu_) = 0;
  // Logged a move along the list since the last answer: quiet until one.
  bool moving_on_ ABSL_GUARDED_BY(dial_mu_) = false;
  // Tracks the address the file named last (at first: the first candidate).
  CoordinatorFinder finder_ ABSL_GUARDED_BY(dial_mu_);
  const std::string token_;
  const std::string sender_;
  const int rpc_timeout_ms_;
  std::string metrics_address_;
  CoordinatorTermFence term_fence_;  // heartbeat answers' and maps'

  // Waits on it (WaitForMap, the watch's backoff) are conditions that mu_'s every release
  // re-evaluates: no condition variable to signal.
  mutable absl::Mutex mu_;
  v1::ClusterMap map_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, std::string>, std::chrono::steady_clock::time_point> last_report_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread watcher_;
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_COORDINATOR_CLIENT_H_

// A CoordinatorLink for unit tests of the roles' lifecycles (header-only; tests only): it
// answers from what the test set and records what it was sent. Thread-safe, since a
// lifecycle heartbeats on a thread of its own.
#ifndef ECPS_RUNTIME_FAKE_COORDINATOR_LINK_H_
#define ECPS_RUNTIME_FAKE_COORDINATOR_LINK_H_

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "runtime/coordinator_link.h"

namespace ecps::testing {

class FakeCoordinatorLink : public CoordinatorLink {
 public:
  // Register answers this (or this error).
  void SetRegistration(absl::StatusOr<v1::RegisterResponse> response) {
    absl::MutexLock lock(&mu_);
    registration_ = std::move(response);
  }
  // The next heartbeats answer these in order; once they run out, UNAVAILABLE.
  void QueueHeartbeatResponse(v1::HeartbeatResponse response) {
    absl::MutexLock lock(&mu_);
    heartbeat_responses_.push_back(std::move(response));
  }
  void SetMap(v1::ClusterMap map) {
    absl::MutexLock lock(&mu_);
    map_ = std::move(map);
  }
  std::vector<v1::HeartbeatRequest> heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  std::vector<v1::RegisterRequest> registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  // (server, address) of every ReportServerUnreachable.
  std::vector<std::pair<int, std::string>> unreachable() const {
    absl::MutexLock lock(&mu_);
    return unreachable_;
  }

  absl::StatusOr<v1::RegisterResponse> Register(v1::Role role, const std::string& address,
                                                int requested_id, const std::string& instance,
                                                int /*wait_ms*/) override {
    absl::MutexLock lock(&mu_);
    v1::RegisterRequest request;
    request.set_role(role);
    request.set_address(address);
    request.set_requested_id(requested_id);
    request.set_instance(instance);
    registrations_.push_back(request);
    return registration_;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) override {
    absl::MutexLock lock(&mu_);
    heartbeats_.push_back(request);
    if (heartbeat_responses_.empty()) return absl::UnavailableError("no heartbeat response queued");
    v1::HeartbeatResponse response = std::move(heartbeat_responses_.front());
    heartbeat_responses_.pop_front();
    return response;
  }
  void ReportServerUnreachable(int id, const std::string& /*reason*/,
                               const std::string& address) override {
    absl::MutexLock lock(&mu_);
    unreachable_.emplace_back(id, address);
  }
  v1::ClusterMap map() const override {
    absl::MutexLock lock(&mu_);
    return map_;
  }
  // Answers at once from the map set: the test sets the map before the step waits.
  absl::StatusOr<v1::ClusterMap> WaitForMap(const std::function<bool(const v1::ClusterMap&)>& ready,
                                            int timeout_ms) override {
    v1::ClusterMap map = this->map();
    if (ready(map)) return map;
    return absl::DeadlineExceededError(
        "the fake's cluster map is not ready (waited " + std::to_string(timeout_ms) + " ms)");
  }
  uint64_t epoch() const override {
    absl::MutexLock lock(&mu_);
    return map_.epoch();
  }

 private:
  mutable absl::Mutex mu_;
  absl::StatusOr<v1::RegisterResponse> registration_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("not set");
  std::deque<v1::HeartbeatResponse> heartbeat_responses_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::RegisterRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, std::string>> unreachable_ ABSL_GUARDED_BY(mu_);
  v1::ClusterMap map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ecps::testing

#endif  // ECPS_RUNTIME_FAKE_COORDINATOR_LINK_H_

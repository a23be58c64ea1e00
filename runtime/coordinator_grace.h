// How a server or worker lives without the coordinator (docs/recovery.md, "While the
// coordinator is away"). The data path (pulls, pushes, parity streams) never goes through the
// coordinator, so a role trains on with the cluster map it holds while its heartbeats fail.
// It retries them with a backoff, the heartbeat interval doubled per failure in a row up to
// kMaxHeartbeatBackoff, so that a coordinator coming back is not met by a burst from every
// role at once. A role that has heard nothing for cluster.coordinator_grace_s stops and says
// why: its coordinator is not coming back, and nobody would end it otherwise.
//
// Thread-compatible: the heartbeat thread alone uses it. Time is passed in, for tests.
#ifndef ECPS_RUNTIME_COORDINATOR_GRACE_H_
#define ECPS_RUNTIME_COORDINATOR_GRACE_H_

#include <chrono>
#include <string>

namespace ecps {

inline constexpr std::chrono::milliseconds kMaxHeartbeatBackoff{2000};

class CoordinatorGrace {
 public:
  using Clock = std::chrono::steady_clock;

  // `interval`: cluster.heartbeat_interval_ms; `grace`: cluster.coordinator_grace_s. The
  // grace runs from `start` until the first answer.
  CoordinatorGrace(std::chrono::milliseconds interval, std::chrono::seconds grace,
                   Clock::time_point start);

  // A heartbeat was answered (any answer: the coordinator is there).
  void Answered(Clock::time_point now);
  // A heartbeat got no answer.
  void Failed(Clock::time_point now);

  // How long to wait before the next heartbeat.
  std::chrono::milliseconds NextWait() const;
  // Whether nothing was heard for the whole grace.
  bool Lost(Clock::time_point now) const { return now - last_answer_ >= grace_; }
  // Since the last answer (or the start).
  std::chrono::milliseconds Silent(Clock::time_point now) const;
  int failures() const { return failures_; }
  std::chrono::seconds grace() const { return grace_; }

  // "no answer from the coordinator at ADDR for 301 s (cluster.coordinator_grace_s = 300)":
  // why a role stops.
  std::string LostMessage(const std::string& coordinator, Clock::time_point now) const;

 private:
  const std::chrono::milliseconds interval_;
  const std::chrono::seconds grace_;
  Clock::time_point last_answer_;
  int failures_ = 0;  // in a row
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_COORDINATOR_GRACE_H_

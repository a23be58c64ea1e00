#include "coordinator/failure_detector.h"

#include <algorithm>

namespace ecps {

FailureDetector::FailureDetector(const Clock* clock, Options options)
    : clock_(clock), options_(options) {}

void FailureDetector::Track(const std::string& node, absl::Duration grace) {
  const absl::Time now = clock_->Now();
  nodes_[node] = Entry{now, now + grace, false, false, false};
}

bool FailureDetector::IsLive(const std::string& node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && !it->second.dead;
}

void FailureDetector::Deaf(absl::Duration duration) {
  if (duration <= absl::ZeroDuration()) return;
  deaf_total_ += duration;
  for (auto& [node, entry] : nodes_) {
    if (!entry.dead) entry.counted_from += duration;
  }
}

void FailureDetector::Forget(const std::string& node) { nodes_.erase(node); }

bool FailureDetector::Heartbeat(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.dead) return false;
  it->second.last_heartbeat = clock_->Now();
  // A grace still running (a takeover's) is kept: right after a takeover a node's next
  // heartbeat may fail as its channels move between coordinators, and back off up to 2 s.
  it->second.counted_from = std::max(it->second.counted_from, it->second.last_heartbeat);
  it->second.suspected = false;
  it->second.gone = false;
  return true;
}

bool FailureDetector::Suspect(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.dead) return false;
  it->second.suspected = true;
  return true;
}

bool FailureDetector::Gone(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.dead || !it->second.suspected) return false;
  it->second.gone = true;
  return true;
}

std::vector<FailureDetector::Death> FailureDetector::Check() {
  const absl::Time now = clock_->Now();
  std::vector<Death> deaths;
  for (auto& [node, entry] : nodes_) {
    if (entry.dead) continue;
    const absl::Duration counted = now - entry.counted_from;
    const bool expired = counted > options_.heartbeat_timeout;
    const bool confirmed =
        entry.suspected && (entry.gone || counted > options_.suspicion_timeout);
    if (expired || confirmed) {
      entry.dead = true;
      deaths.push_back(Death{node, now - entry.last_heartbeat, entry.suspected,
                             entry.suspected && entry.gone});
    }
  }
  return deaths;
}

bool FailureDetector::IsSuspected(const std::string& node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.suspected && !it->second.dead;
}

bool FailureDetector::IsDead(const std::string& node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.dead;
}

std::optional<absl::Duration> FailureDetector::SinceHeartbeat(const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return clock_->Now() - it->second.last_heartbeat;
}

}  // namespace ecps

#include "cli/replacement_supervisor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ecps {
namespace {

// Whether a dead server of `mode` can be replaced: its rows come back from parity or
// replicas, or (checkpoint) the job rolls back to the last checkpoint.
bool ServersReplaceable(FaultToleranceMode mode) {
  return KeepsRedundancy(mode) || mode == FaultToleranceMode::kCheckpoint;
}

}  // namespace

ReplacementSupervisor::ReplacementSupervisor(FaultToleranceMode mode, RoleSpawner* spawner,
                                             LaunchBackend* backend)
    : mode_(mode), spawner_(spawner), backend_(backend) {}

std::string ReplacementSupervisor::Supervise(const v1::StatusResponse& st, EventLog* events) {
  bool standby = false;
  for (const auto& n : st.nodes()) standby |= n.state() == v1::NODE_STANDBY;
  for (const auto& n : st.nodes()) {
    if (n.id() >= 0 && (n.state() == v1::NODE_ACTIVE || n.state() == v1::NODE_FINISHED)) {
      restarts_.erase(Slot(static_cast<int>(n.role()), n.id()));  // recovered
    }
  }
  for (const auto& n : st.nodes()) {
    if (n.id() < 0 || n.state() != v1::NODE_DEAD) continue;
    // A standby spare takes a dead server's slot itself.
    if (n.role() == v1::ROLE_SERVER && (!ServersReplaceable(mode_) || standby)) continue;
    const Slot slot(static_cast<int>(n.role()), n.id());
    auto running = replacements_.find(slot);
    if (running != replacements_.end() && !backend_->child(running->second).exited) continue;
    int& count = restarts_[slot];
    const std::string label = NodeLabel(n.role(), n.id());
    if (count >= kMaxRestarts && running == replacements_.end()) {
      return absl::StrFormat("%s: %d replacements could not be started; giving up", label, count);
    }
    if (count >= kMaxRestarts) {
      const Child& last = backend_->child(running->second);
      return absl::StrFormat(
          "%s: %d replacements in a row died before it recovered (the last %s); giving up. "
          "Its log %s ends with:\n%s",
          label, count, DescribeExit(last.exit_status), last.log_path, TailFile(last.log_path, 8));
    }
    ++count;
    const std::string name =
        absl::StrCat(n.role() == v1::ROLE_SERVER ? "server-" : "worker-", n.id(), "-r", count);
    auto spawned = spawner_->SpawnReplacement(n.role(), n.id(), name);
    if (!spawned.ok()) {
      events->Add("cannot start a replacement " + label + ": " + spawned.status().ToString());
      continue;
    }
    replacements_[slot] = *spawned;
    events->Add(absl::StrFormat("started a replacement %s (pid %d)", label,
                                backend_->child(*spawned).pid));
  }
  return "";
}

}  // namespace ecps

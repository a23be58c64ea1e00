#include "cli/drills.h"

#include <signal.h>

#include "absl/strings/str_format.h"

namespace ecps {

DrillRunner::DrillRunner(std::vector<FaultSpec> faults, LaunchBackend* backend)
    : faults_(std::move(faults)), backend_(backend), done_(faults_.size(), false) {}

int DrillRunner::ChildWithPid(int64_t pid) const {
  for (int i = 0; i < backend_->size(); ++i) {
    if (backend_->child(i).pid == pid && !backend_->child(i).exited) return i;
  }
  return -1;
}

void DrillRunner::Run(const v1::StatusResponse& st, double t, CoordinatorClient* client,
                      EventLog* events) {
  for (size_t i = 0; i < faults_.size(); ++i) {
    const FaultSpec& f = faults_[i];
    if (done_[i] || st.step() < f.at_step) continue;
    if (f.action == FaultAction::kKillCoordinator) {
      // The launcher's own child (CheckDrills refuses it elsewhere); a new one takes over.
      const int active = active_coordinator_ ? active_coordinator_() : -1;
      if (active_coordinator_ && active < 0) continue;  // none leads right now: next poll
      for (int c = 0; c < backend_->size(); ++c) {
        const Child& child = backend_->child(c);
        if (child.name != "coordinator" || child.exited) continue;
        if (active >= 0 && c != active) continue;
        done_[i] = true;
        victims_.insert(static_cast<pid_t>(child.pid));
        down_for_[static_cast<pid_t>(child.pid)] = f.duration_s;
        records_.push_back(DrillRecord{f, t, child.pid});
        backend_->Signal(c, SIGKILL);
        events->Add(absl::StrFormat(
            "drill at step %d: SIGKILL the coordinator (pid %d)%s", st.step(), child.pid,
            f.duration_s > 0 ? absl::StrFormat("; a new one in %.1f s", f.duration_s) : ""));
      }
      continue;
    }
    const v1::Role role = f.action == FaultAction::kKillWorker ? v1::ROLE_WORKER : v1::ROLE_SERVER;
    int index = -1;
    int64_t pid = 0;
    for (const auto& n : st.nodes()) {
      if (n.role() != role || n.id() != f.target || n.state() == v1::NODE_DEAD) continue;
      if (n.state() == v1::NODE_FINISHED) continue;
      // A process an earlier drill killed or stopped holds the role only until the
      // coordinator notices: the next drill on that target is for its replacement.
      if (IsVictim(static_cast<pid_t>(n.pid()))) continue;
      index = ChildWithPid(n.pid());
      pid = n.pid();
    }
    // Nobody holds it right now: try again at the next poll.
    if (pid == 0 || (backend_->SignalsRoles() && index < 0)) continue;
    done_[i] = true;
    const std::string label = NodeLabel(role, f.target);
    victims_.insert(static_cast<pid_t>(pid));
    records_.push_back(DrillRecord{f, t, pid});
    if (!backend_->SignalsRoles()) {
      // The role may be on another node: the coordinator has it kill itself (SIGKILL) at
      // its next heartbeat, as `ecps kill` does. (stop_server was refused at the start.)
      absl::Status killed = client->Kill(role, f.target);
      events->Add(absl::StrFormat("drill at step %d: kill %s (pid %d) through the coordinator%s",
                                  st.step(), label, pid,
                                  killed.ok() ? "" : ": " + killed.ToString()));
    } else if (f.action == FaultAction::kStopServer) {
      backend_->Signal(index, SIGSTOP);
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(f.duration_s * 1000));
      stopped_.push_back(Stopped{index, until, label, pid});
      events->Add(absl::StrFormat("drill at step %d: SIGSTOP %s (pid %d) for %.1f s", st.step(),
                                  label, pid, f.duration_s));
    } else {
      backend_->Signal(index, SIGKILL);
      events->Add(absl::StrFormat("drill at step %d: SIGKILL %s (pid %d)", st.step(), label, pid));
    }
  }
}

void DrillRunner::ContinueStopped(EventLog* events) {
  for (auto it = stopped_.begin(); it != stopped_.end();) {
    if (std::chrono::steady_clock::now() < it->until) {
      ++it;
      continue;
    }
    backend_->Signal(it->index, SIGCONT);
    events->Add(absl::StrFormat("drill: SIGCONT %s (pid %d); the old instance must find itself "
                                "fenced",
                                it->label, it->pid));
    it = stopped_.erase(it);
  }
}

}  // namespace ecps

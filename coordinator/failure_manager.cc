#include "coordinator/failure_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proto/coordinator_state.pb.h"
#include "spdlog/spdlog.h"

namespace ecps {

FailureManager::FailureManager(const Clock* clock, Options options)
    : clock_(clock),
      options_(std::move(options)),
      detector_(clock, options_.detector),
      history_(options_.row_payload_bytes) {}

void FailureManager::Registered(const Membership::Registration& reg, int64_t pid,
                                uint64_t epoch) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (reg.replaced) detector_.Forget(*reg.replaced);
  detector_.Track(reg.node.instance);
  if (reg.node.spare) {
    spdlog::info("spare server registered at {} (pid {}, instance {}): standby", reg.node.address,
                 pid, reg.node.instance);
  } else if (reg.replaced) {
    spdlog::warn("{} replaces dead instance {}; epoch now {}", DescribeNode(reg.node),
                 *reg.replaced, epoch);
    history_.Replaced(reg.node.role, reg.node.id, reg.node.instance, pid, /*by_spare=*/false, now);
    if (reg.resume) {
      worker_resume_step_[reg.node.id] = reg.resume->step();
      spdlog::info("worker {} resumes the dead worker's partition after step {} at reader "
                   "position {}", reg.node.id, reg.resume->step(), reg.resume->reader_position());
    }
  } else {
    spdlog::info("{} registered (pid {})", DescribeNode(reg.node), pid);
  }
}

void FailureManager::SparePromoted(int server_id, const Membership::Registration& promoted,
                                   uint64_t epoch) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  detector_.Forget(*promoted.replaced);
  // The spare was heartbeating as a standby: its deadline stands (a takeover's grace with it,
  // which a spare still backing off from the old coordinator needs).
  if (!detector_.IsLive(promoted.node.instance)) detector_.Track(promoted.node.instance);
  history_.Replaced(v1::ROLE_SERVER, server_id, promoted.node.instance, promoted.node.pid,
                    /*by_spare=*/true, now);
  spdlog::warn("spare {} (pid {}) promoted to server {}, replacing dead instance {}: recovering; "
               "epoch now {}", promoted.node.instance, promoted.node.pid, server_id,
               *promoted.replaced, epoch);
}

bool FailureManager::Resumes(int worker) const {
  absl::MutexLock lock(&mu_);
  return worker_resume_step_.contains(worker);
}

void FailureManager::Heartbeat(const Membership::HeartbeatResult& result,
                               const v1::HeartbeatRequest& request) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  detector_.Heartbeat(result.node.instance);
  if (result.node.role == v1::ROLE_SERVER && !result.node.spare &&
      history_.Open(v1::ROLE_SERVER, result.node.id)) {
    history_.Progress(result.node.id, request.server());
    if (result.state == v1::NODE_ACTIVE &&
        history_.Recovered(v1::ROLE_SERVER, result.node.id, now)) {
      spdlog::info("server {} recovered: instance {} is active ({} rows rebuilt, {} on demand)",
                   result.node.id, result.node.instance, request.server().rebuild_rows_done(),
                   request.server().on_demand_rebuilds());
    }
  }
  if (result.node.role != v1::ROLE_WORKER) return;
  auto resume = worker_resume_step_.find(result.node.id);
  if (resume != worker_resume_step_.end() &&
      (request.worker().step() > resume->second || request.worker().done()) &&
      history_.Recovered(v1::ROLE_WORKER, result.node.id, now)) {
    spdlog::info("worker {} recovered: instance {} trains again (step {})", result.node.id,
                 result.node.instance, request.worker().step());
  }
  // A finished worker may exit before the job ends: its silence is not a failure.
  if (result.became_done) detector_.Forget(result.node.instance);
}

void FailureManager::NoteUnhealthy(const NodeRef& node, const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (!unhealthy_.emplace(node.instance, why).second) return;
  spdlog::warn("{} reports itself unhealthy: {}", DescribeNode(node), why);
  // Declared dead at the next check, as a worker whose process is gone would be.
  detector_.Suspect(node.instance);
  detector_.Gone(node.instance);
}

void FailureManager::Track(const std::string& instance, absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  detector_.Track(instance, grace);
}

void FailureManager::RequestKill(const std::string& instance) {
  absl::MutexLock lock(&mu_);
  kill_requested_.insert(instance);
}

bool FailureManager::KillRequested(const std::string& instance) const {
  absl::MutexLock lock(&mu_);
  return kill_requested_.contains(instance);
}

bool FailureManager::Suspect(const std::string& instance) {
  absl::MutexLock lock(&mu_);
  return detector_.Suspect(instance);
}

bool FailureManager::IsSuspected(const std::string& instance) const {
  absl::MutexLock lock(&mu_);
  return detector_.IsSuspected(instance);
}

bool FailureManager::Gone(const std::string& instance) {
  absl::MutexLock lock(&mu_);
  return detector_.Gone(instance);
}

std::vector<FailureDetector::Death> FailureManager::Check() {
  absl::MutexLock lock(&mu_);
  return detector_.Check();
}

std::string FailureManager::Declared(const NodeRef& node, const FailureDetector::Death& death) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  const bool killed = kill_requested_.erase(node.instance) > 0;
  const auto unhealthy = unhealthy_.find(node.instance);
  const std::string reason =
      unhealthy != unhealthy_.end() ? absl::StrCat("unhealthy: ", unhealthy->second)
      : death.gone
          ? absl::StrFormat("reported failed, and its port refuses connections (last "
                            "heartbeat %.1f s before)%s",
                            absl::ToDoubleSeconds(death.silence),
                            killed ? " (killed by ecps kill)" : "")
          : absl::StrFormat("no heartbeat for %.1f s%s%s", absl::ToDoubleSeconds(death.silence),
                            death.reported ? " after a failure report" : "",
                            killed ? " (killed by ecps kill)" : "");
  if (unhealthy != unhealthy_.end()) unhealthy_.erase(unhealthy);
  const bool counts = (node.role == v1::ROLE_SERVER && !node.spare) ||
                      (node.role == v1::ROLE_WORKER && !node.worker_done);
  if (counts) {
    history_.Declared(node.role, node.id, node.instance, node.pid, now - death.silence, now,
                      reason);
  }
  if (counts && node.role == v1::ROLE_WORKER) worker_resume_step_.erase(node.id);
  return absl::StrCat(DescribeNode(node), " declared dead: ", reason);
}

void FailureManager::Deaf(absl::Duration duration, const char* why) {
  absl::MutexLock lock(&mu_);
  detector_.Deaf(duration);
  // Worth a line once it is a good part of a timeout; shorter ones are routine.
  if (duration >= detector_.options().heartbeat_timeout / 4) {
    spdlog::warn("coordinator: heard nobody for {:.2f} s ({}); every node's heartbeat deadline "
                 "moves on by that much", absl::ToDoubleSeconds(duration), why);
  }
}

std::optional<absl::Duration> FailureManager::SinceHeartbeat(const std::string& instance) const {
  absl::MutexLock lock(&mu_);
  return detector_.SinceHeartbeat(instance);
}

bool FailureManager::ProcessGoneAt(const std::string& address) const {
  return options_.process_gone && !address.empty() && options_.process_gone(address);
}

std::string FailureManager::DataLoss(const v1::ClusterMap& map) const {
  if (!options_.placement || !options_.keeps_redundancy) return "";
  // A replacement still rebuilding holds only some of its rows, and which is not known
  // here: it counts as lost until it is ACTIVE.
  std::vector<int> lost;
  for (int s = 0; s < map.servers_size(); ++s) {
    const v1::NodeState st = map.servers(s).state();
    if (st == v1::NODE_DEAD || st == v1::NODE_RECOVERING) lost.push_back(s);
  }
  const std::vector<Placement::Loss> losses = options_.placement->Unrecoverable(lost);
  if (losses.empty()) return "";
  int64_t stripes = 0;
  std::vector<std::string> tables;
  for (const Placement::Loss& l : losses) {
    stripes += l.stripes;
    if (tables.size() < 8) {
      tables.push_back(absl::StrCat("table ", l.table, ": ", l.stripes, " stripes from ",
                                    l.first_stripe));
    }
  }
  if (losses.size() > tables.size()) {
    tables.push_back(absl::StrCat("and ", losses.size() - tables.size(), " more tables"));
  }
  std::vector<std::string> names;
  for (int s : lost) {
    names.push_back(absl::StrCat(s, map.servers(s).state() == v1::NODE_DEAD ? " (dead)"
                                                                            : " (rebuilding)"));
  }
  return absl::StrCat("DATA LOST: servers ", absl::StrJoin(names, ", "), " are gone, more than ",
                      "r = ", options_.r, " members of ", stripes, " stripes (",
                      absl::StrJoin(tables, "; "),
                      "): those rows cannot be rebuilt; restart from a checkpoint "
                      "(job.resume_from)");
}

void FailureManager::SetServerDeadHandler(ServerDeadHandler handler) {
  absl::MutexLock lock(&mu_);
  server_dead_handler_ = std::move(handler);
}

FailureManager::ServerDeadHandler FailureManager::server_dead_handler() const {
  absl::MutexLock lock(&mu_);
  return server_dead_handler_;
}

void FailureManager::Save(v1::CoordinatorState* state) const {
  absl::MutexLock lock(&mu_);
  for (const v1::FailureEvent& event : history_.events()) *state->add_failures() = event;
  for (const auto& [worker, step] : worker_resume_step_) {
    (*state->mutable_worker_resume_step())[worker] = step;
  }
  for (const std::string& instance : kill_requested_) state->add_kill_requested(instance);
}

void FailureManager::Restore(const v1::CoordinatorState& state) {
  absl::MutexLock lock(&mu_);
  history_.Restore({state.failures().begin(), state.failures().end()});
  worker_resume_step_.clear();
  for (const auto& [worker, step] : state.worker_resume_step()) worker_resume_step_[worker] = step;
  kill_requested_ = {state.kill_requested().begin(), state.kill_requested().end()};
}

void FailureManager::FillStatus(v1::StatusResponse* response) const {
  absl::MutexLock lock(&mu_);
  history_.Fill(response);
}

}  // namespace ecps

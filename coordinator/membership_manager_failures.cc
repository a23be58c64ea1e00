// MembershipManager's side of failures, apart from the table and the map in
// membership_manager.cc: kills, failure reports, detection, the startup timeout, a spare's
// promotion and the data-loss check. The failure manager decides who is dead; this file
// marks them in the table, under the same lock that publishes the map.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/membership_manager.h"
#include "runtime/status_macros.h"
#include "spdlog/spdlog.h"

namespace ecps {

absl::Status MembershipManager::Kill(const v1::KillRequest& request,
                                     v1::KillResponse* response) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NodeRef node, membership_.Holder(request.role(), request.id()));
  const std::optional<v1::NodeState> state = membership_.StateOf(node.instance);
  if (!state || *state == v1::NODE_DEAD || *state == v1::NODE_FINISHED) {
    return absl::FailedPreconditionError(
        absl::StrCat(NodeName(node), " has no live instance to kill"));
  }
  failures_->RequestKill(node.instance);
  SaveChangeLocked();  // before the admin hears it was asked
  const std::string sender =
      request.header().sender().empty() ? "an admin" : request.header().sender();
  spdlog::warn("{}: kill requested by {}; it dies at its next heartbeat", DescribeNode(node),
               sender);
  response->set_instance(node.instance);
  response->set_pid(node.pid);
  return absl::OkStatus();
}

bool MembershipManager::ReplaceServer(int server_id) {
  absl::MutexLock lock(&mu_);
  if (FinalLocked()) return false;
  absl::StatusOr<Membership::Registration> promoted = membership_.PromoteSpare(server_id);
  if (!promoted.ok()) {
    if (promoted.status().code() == absl::StatusCode::kNotFound) {
      spdlog::warn("server {}: no standby spare left; waiting for a replacement process to "
                   "register as server {}", server_id, server_id);
    } else {
      spdlog::warn("server {}: cannot promote a spare: {}", server_id,
                   promoted.status().ToString());
    }
    UpdatePhaseLocked();
    PublishLocked();
    return false;
  }
  failures_->SparePromoted(server_id, *promoted, membership_.epoch());
  UpdatePhaseLocked();
  PublishLocked();
  return true;
}

absl::StatusOr<MembershipManager::Report> MembershipManager::ReportFailure(
    const v1::ReportFailureRequest& request) {
  absl::MutexLock lock(&mu_);
  Report report;
  ASSIGN_OR_RETURN(NodeRef node, membership_.Holder(request.role(), request.id()));
  const std::optional<v1::NodeState> state = membership_.StateOf(node.instance);
  if (FinalLocked() || !state || *state == v1::NODE_DEAD || *state == v1::NODE_FINISHED) {
    return report;
  }
  const std::string sender =
      request.header().sender().empty() ? "a peer" : request.header().sender();
  if (!request.address().empty() && request.address() != node.address) {
    // The reporter addressed the id's previous holder (a failure seen before the takeover):
    // nothing to say about the replacement.
    spdlog::info("report by {} about {} at {} ignored ({}): the id is now held at {}", sender,
                 NodeName(node), request.address(), request.reason(), node.address);
    return report;
  }
  if (failures_->Suspect(node.instance) && membership_.MarkSuspect(node.instance)) {
    spdlog::warn("{} reported failed by {}: {}; suspect", DescribeNode(node), sender,
                 request.reason());
  }
  report.dead = DetectLocked();
  PublishLocked();
  if (node.role == v1::ROLE_SERVER && failures_->IsSuspected(node.instance)) report.probe = node;
  return report;
}

MembershipManager::TickResult MembershipManager::Tick() {
  absl::MutexLock lock(&mu_);
  TickResult result;
  if (FinalLocked()) return result;
  result.dead = DetectLocked();
  result.suspected = SuspectedServersLocked();
  if (phase_ == v1::JOB_STARTING && clock_->Now() - created_ > options_.startup_timeout) {
    FailJobLocked(
        absl::StrCat("startup timeout: after ", absl::FormatDuration(options_.startup_timeout),
                     " the job still waits for ", absl::StrJoin(membership_.Waiting(), ", ")));
  }
  PublishLocked();
  return result;
}

std::vector<MembershipManager::DeadServer> MembershipManager::DeclareGone(const NodeRef& node) {
  absl::MutexLock lock(&mu_);
  if (!failures_->Gone(node.instance)) return {};
  std::vector<DeadServer> dead = DetectLocked();
  PublishLocked();
  return dead;
}

bool MembershipManager::EndedOrDataLost() {
  absl::MutexLock lock(&mu_);
  if (FinalLocked()) return true;
  v1::ClusterMap map;
  membership_.FillClusterMap(&map);
  std::string loss = failures_->DataLoss(map);
  if (loss.empty()) return false;
  data_lost_ = true;
  FailJobLocked(loss);
  PublishLocked();
  return true;
}

void MembershipManager::Stalled(absl::Duration duration) {
  // Under mu_ as a save's deafness is: a heartbeat either was heard before, or after.
  absl::MutexLock lock(&mu_);
  failures_->Deaf(duration, "its threads were not scheduled");
}

std::vector<MembershipManager::DeadServer> MembershipManager::DetectLocked() {
  std::vector<DeadServer> dead_servers;
  if (FinalLocked()) return dead_servers;
  for (const FailureDetector::Death& death : failures_->Check()) {
    const std::optional<NodeRef> node = membership_.MarkDead(death.node);
    if (!node) continue;
    const std::string why = failures_->Declared(*node, death);
    spdlog::warn("{}; epoch now {}", why, membership_.epoch());
    if (node->role == v1::ROLE_SERVER && !node->spare) {
      dead_servers.push_back(DeadServer{node->id, why});
    } else if (node->role == v1::ROLE_WORKER && !node->worker_done) {
      const v1::WorkerProgress* last = membership_.WorkerProgressOf(node->id);
      progress_->Stopped(node->id);  // a dead worker trains no more samples per second
      spdlog::warn("worker {}: waiting for a replacement to register as worker {}; it resumes "
                   "after step {} at reader position {}", node->id, node->id,
                   last != nullptr ? last->step() : 0,
                   last != nullptr ? last->reader_position() : 0);
    }
  }
  return dead_servers;
}

std::vector<NodeRef> MembershipManager::SuspectedServersLocked() const {
  std::vector<NodeRef> suspected;
  if (!failures_->probes()) return suspected;
  for (const std::string& instance : membership_.LiveInstances()) {
    if (!failures_->IsSuspected(instance)) continue;
    std::optional<NodeRef> node = membership_.Find(instance);
    if (node && node->role == v1::ROLE_SERVER && !node->address.empty()) {
      suspected.push_back(*node);
    }
  }
  return suspected;
}

}  // namespace ecps

// CoordinatorService's failure handling, apart from the handlers and the phase machine in
// coordinator_service.cc: failure reports, the probe of suspected servers, declaring nodes
// dead, the data-loss check and handing dead servers to the ServerDeadHandler.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator_service.h"
#include "proto/ecps.pb.h"
#include "domain/placement.h"
#include "runtime/rpc.h"
#include "runtime/status_macros.h"
#include "spdlog/spdlog.h"

namespace ecps {

absl::Status CoordinatorService::ReportFailure(const v1::ReportFailureRequest& request,
                                               v1::ReportFailureResponse* /*response*/) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  std::vector<DeadServer> dead;
  NodeRef probe;  // a suspected server whose process may be gone
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(NodeRef node, membership_.Holder(request.role(), request.id()));
    const std::optional<v1::NodeState> state = membership_.StateOf(node.instance);
    if (Final() || !state || *state == v1::NODE_DEAD || *state == v1::NODE_FINISHED) {
      return absl::OkStatus();
    }
    const std::string sender =
        request.header().sender().empty() ? "a peer" : request.header().sender();
    if (!request.address().empty() && request.address() != node.address) {
      // The reporter addressed the id's previous holder (a failure seen before the takeover):
      // nothing to say about the replacement.
      spdlog::info("report by {} about {} at {} ignored ({}): the id is now held at {}", sender,
                   NodeName(node), request.address(), request.reason(), node.address);
      return absl::OkStatus();
    }
    if (detector_.Suspect(node.instance) && membership_.MarkSuspect(node.instance)) {
      spdlog::warn("{} reported failed by {}: {}; suspect", DescribeNode(node), sender,
                   request.reason());
    }
    dead = DetectLocked();
    PublishLocked();
    if (node.role == v1::ROLE_SERVER && detector_.IsSuspected(node.instance)) probe = node;
  }
  HandleDeadServers(dead);
  // A killed process's port refuses connections at once: no need to wait out the suspicion
  // timeout. Anything else (a stopped process, a partition) waits as before. The tick probes
  // again while the suspicion lasts: a report can come before the process is gone.
  if (!probe.instance.empty()) ProbeSuspected({probe});
  return absl::OkStatus();
}

std::vector<NodeRef> CoordinatorService::SuspectedServersLocked() const {
  std::vector<NodeRef> suspected;
  if (!options_.process_gone) return suspected;
  for (const std::string& instance : membership_.LiveInstances()) {
    if (!detector_.IsSuspected(instance)) continue;
    std::optional<NodeRef> node = membership_.Find(instance);
    if (node && node->role == v1::ROLE_SERVER && !node->address.empty()) {
      suspected.push_back(*node);
    }
  }
  return suspected;
}

void CoordinatorService::ProbeSuspected(const std::vector<NodeRef>& servers) {
  if (!options_.process_gone) return;
  for (const NodeRef& node : servers) {
    if (node.address.empty() || !options_.process_gone(node.address)) continue;
    std::vector<DeadServer> dead;
    {
      absl::MutexLock lock(&mu_);
      if (!detector_.Gone(node.instance)) continue;
      dead = DetectLocked();
      PublishLocked();
    }
    HandleDeadServers(dead);
  }
}

void CoordinatorService::NoteUnhealthyLocked(const NodeRef& node,
                                             const v1::WorkerProgress& progress) {
  if (!unhealthy_.emplace(node.instance, progress.unhealthy()).second) return;
  spdlog::warn("{} reports itself unhealthy: {}", DescribeNode(node), progress.unhealthy());
  // Declared dead at the next check, as a worker whose process is gone would be.
  detector_.Suspect(node.instance);
  detector_.Gone(node.instance);
}

std::vector<CoordinatorService::DeadServer> CoordinatorService::DetectLocked() {
  std::vector<DeadServer> dead_servers;
  if (Final()) return dead_servers;
  for (const FailureDetector::Death& death : detector_.Check()) {
    const std::optional<NodeRef> node = membership_.MarkDead(death.node);
    if (!node) continue;
    const bool killed = kill_requested_.erase(node->instance) > 0;
    const auto unhealthy = unhealthy_.find(node->instance);
    const std::string reason =
        unhealthy != unhealthy_.end() ? absl::StrCat("unhealthy: ", unhealthy->second)
        : death.gone
            ? absl::StrFormat("reported failed, and its port refuses connections (last "
                              "heartbeat %.1f s before)%s",
                              absl::ToDoubleSeconds(death.silence),
                              killed ? " (killed by ecps kill)" : "")
            : absl::StrFormat("no heartbeat for %.1f s%s%s",
                              absl::ToDoubleSeconds(death.silence),
                              death.reported ? " after a failure report" : "",
                              killed ? " (killed by ecps kill)" : "");
    if (unhealthy != unhealthy_.end()) unhealthy_.erase(unhealthy);
    const std::string why = absl::StrCat(DescribeNode(*node), " declared dead: ", reason);
    spdlog::warn("{}; epoch now {}", why, membership_.epoch());
    const absl::Time now = clock_->Now();
    if (node->role == v1::ROLE_SERVER && !node->spare) {
      history_.Declared(v1::ROLE_SERVER, node->id, node->instance, node->pid, now - death.silence,
                        now, reason);
      dead_servers.push_back(DeadServer{node->id, why});
    } else if (node->role == v1::ROLE_WORKER && !node->worker_done) {
      history_.Declared(v1::ROLE_WORKER, node->id, node->instance, node->pid, now - death.silence,
                        now, reason);
      worker_resume_step_.erase(node->id);
      const v1::WorkerProgress* last = membership_.WorkerProgressOf(node->id);
      progress_.Stopped(node->id);  // a dead worker trains no more samples per second
      spdlog::warn("worker {}: waiting for a replacement to register as worker {}; it resumes "
                   "after step {} at reader position {}", node->id, node->id,
                   last != nullptr ? last->step() : 0,
                   last != nullptr ? last->reader_position() : 0);
    }
  }
  return dead_servers;
}

std::string CoordinatorService::DataLossLocked() const {
  if (!placement_ || !KeepsRedundancy(membership_.config().mode)) return "";
  v1::ClusterMap map;
  membership_.FillClusterMap(&map);
  // A replacement still rebuilding holds only some of its rows, and which is not known
  // here: it counts as lost until it is ACTIVE.
  std::vector<int> lost;
  for (int s = 0; s < map.servers_size(); ++s) {
    const v1::NodeState st = map.servers(s).state();
    if (st == v1::NODE_DEAD || st == v1::NODE_RECOVERING) lost.push_back(s);
  }
  const std::vector<Placement::Loss> losses = placement_->Unrecoverable(lost);
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
                      "r = ", membership_.config().r, " members of ", stripes,
                      " stripes (", absl::StrJoin(tables, "; "),
                      "): those rows cannot be rebuilt; restart from a checkpoint "
                      "(job.resume_from)");
}

void CoordinatorService::HandleDeadServers(const std::vector<DeadServer>& dead) {
  for (const DeadServer& server : dead) {
    ServerDeadHandler handler;
    {
      absl::MutexLock lock(&mu_);
      // Recovery is pointless once a stripe lost more than r members: say so at once and
      // end the job, rather than leave replacements waiting for members that are gone.
      if (Final()) return;
      if (std::string loss = DataLossLocked(); !loss.empty()) {
        data_lost_ = true;
        FailJobLocked(loss);
        PublishLocked();
        return;
      }
      handler = server_dead_handler_;
    }
    const bool handled = handler && handler(server.id);
    if (handled) {
      absl::MutexLock lock(&mu_);
      UpdatePhaseLocked();
      PublishLocked();
    } else {
      absl::MutexLock lock(&mu_);
      FailJobLocked(absl::StrCat(server.why, "; no recovery for it (fault_tolerance.mode '",
                                 ToString(membership_.config().mode), "')"));
      PublishLocked();
    }
  }
}

}  // namespace ecps

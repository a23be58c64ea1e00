#include "coordinator/coordinator_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"
#include "domain/placement.h"
#include "runtime/status_macros.h"

namespace ecps {
namespace {

// k and r as the mode uses them: INVALID_ARGUMENT when they do not fit the servers.
absl::Status SetRedundancy(const FaultToleranceSection& ft, Membership::Config* config) {
  config->mode = ft.mode;
  switch (ft.mode) {
    case FaultToleranceMode::kNone:
    case FaultToleranceMode::kCheckpoint:
      config->k = 1;
      config->r = 0;
      break;
    case FaultToleranceMode::kReplication:
      config->k = 1;
      config->r = ft.r;
      break;
    case FaultToleranceMode::kErasureCode:
      config->k = ft.k;
      config->r = ft.r;
      break;
  }
  if (config->k < 1 || config->r < 0 || config->k + config->r > config->servers) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault_tolerance: k=", config->k, " r=", config->r, " needs k >= 1, r >= 0 ",
                     "and k + r <= cluster.servers (", config->servers, ")"));
  }
  return absl::OkStatus();
}

CheckpointSchedule ScheduleOf(const FaultToleranceSection& ft) {
  return CheckpointSchedule(ft.mode == FaultToleranceMode::kCheckpoint,
                            ft.checkpoint.interval_steps, ft.checkpoint.interval_seconds,
                            ft.checkpoint.save_final);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Create(
    const JobSpec& spec, std::string token, const Clock* clock, CoordinatorServiceOptions options) {
  if (clock == nullptr) return absl::InvalidArgumentError("coordinator: clock is null");
  if (spec.cluster.servers < 1) {
    return absl::InvalidArgumentError("cluster.servers must be at least 1");
  }
  if (spec.cluster.workers < 1) {
    return absl::InvalidArgumentError("cluster.workers must be at least 1");
  }
  if (options.heartbeat_timeout <= absl::ZeroDuration()) {
    if (spec.cluster.heartbeat_timeout_ms <= 0) {
      return absl::InvalidArgumentError("cluster.heartbeat_timeout_ms must be positive");
    }
    options.heartbeat_timeout = absl::Milliseconds(spec.cluster.heartbeat_timeout_ms);
  }
  if (options.suspicion_timeout <= absl::ZeroDuration()) {
    options.suspicion_timeout = options.heartbeat_timeout / 3;
  }
  if (options.watch_wakeup <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("coordinator: watch_wakeup must be positive");
  }
  Membership::Config config;
  config.servers = spec.cluster.servers;
  config.workers = spec.cluster.workers;
  RETURN_IF_ERROR(SetRedundancy(spec.fault_tolerance, &config));

  FailureManager::Options failure_options;
  failure_options.detector.heartbeat_timeout = options.heartbeat_timeout;
  failure_options.detector.suspicion_timeout = options.suspicion_timeout;
  failure_options.row_payload_bytes =
      RowPayloadBytes(spec.model.embedding_dim, spec.optimizer.sparse.type);
  auto placement = Placement::Create(spec.cluster.servers, config.k, config.r,
                                     spec.model.table_rows);
  if (placement.ok()) failure_options.placement = std::move(*placement);
  failure_options.keeps_redundancy = KeepsRedundancy(config.mode);
  failure_options.r = config.r;
  failure_options.process_gone = options.process_gone;
  return std::unique_ptr<CoordinatorService>(new CoordinatorService(
      spec, std::move(token), clock, options, std::move(config), std::move(failure_options)));
}

CoordinatorService::CoordinatorService(const JobSpec& spec, std::string token, const Clock* clock,
                                       CoordinatorServiceOptions options, Membership::Config config,
                                       FailureManager::Options failure_options)
    : gatekeeper_(std::move(token)),
      failures_(clock, std::move(failure_options)),
      progress_(clock, spec.cluster.workers, spec.job.steps),
      membership_(clock, std::move(config),
                  MembershipManager::Options{spec.job.name, options.startup_timeout,
                                             options.watch_wakeup},
                  &failures_, &progress_,
                  MembershipManager::Hooks{
                      [this](v1::CoordinatorState* state) {
                        failures_.Save(state);
                        checkpoints_.Save(state);
                        scrubs_.Save(state);
                      },
                      [this] { return checkpoints_.FinalWanted(); },
                      [this] { return scrubs_.FinalWanted(); },
                      [this] { checkpoints_.RequestFinal(); },
                      [this] { scrubs_.RequestFinal(); }}),
      checkpoints_(clock, ScheduleOf(spec.fault_tolerance), spec.job.name, &membership_,
                   &progress_),
      scrubs_(KeepsRedundancy(spec.fault_tolerance.mode), &membership_) {}

CoordinatorService::~CoordinatorService() = default;

absl::Status CoordinatorService::Register(const v1::RegisterRequest& request,
                                          v1::RegisterResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  return membership_.Register(request, response);
}

absl::Status CoordinatorService::Heartbeat(const v1::HeartbeatRequest& request,
                                           v1::HeartbeatResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  RETURN_IF_ERROR(membership_.Heartbeat(request, response));
  if (request.role() == v1::ROLE_WORKER) {
    checkpoints_.FillHeartbeat(request.id(), membership_.config().workers, response);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::Kill(const v1::KillRequest& request,
                                      v1::KillResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  return membership_.Kill(request, response);
}

bool CoordinatorService::ReplaceServer(int server_id) {
  return membership_.ReplaceServer(server_id);
}

absl::Status CoordinatorService::Status(const v1::StatusRequest& request,
                                        v1::StatusResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  membership_.FillStatus(response);  // first: the nodes, which the progress fills in
  progress_.FillStatus(response);
  failures_.FillStatus(response);
  checkpoints_.FillStatus(response);
  scrubs_.FillStatus(response);
  return absl::OkStatus();
}

absl::Status CoordinatorService::WatchClusterMap(
    const v1::WatchClusterMapRequest& request, const std::function<bool()>& cancelled,
    const std::function<bool(const v1::ClusterMap&)>& send) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  return membership_.WatchClusterMap(request, cancelled, send);
}

absl::Status CoordinatorService::ReportFailure(const v1::ReportFailureRequest& request,
                                               v1::ReportFailureResponse* /*response*/) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  ASSIGN_OR_RETURN(MembershipManager::Report report, membership_.ReportFailure(request));
  HandleDeadServers(report.dead);
  // A killed process's port refuses connections at once: no need to wait out the suspicion
  // timeout. Anything else (a stopped process, a partition) waits as before. The tick probes
  // again while the suspicion lasts: a report can come before the process is gone.
  if (report.probe) ProbeSuspected({*report.probe});
  return absl::OkStatus();
}

void CoordinatorService::Tick() {
  MembershipManager::TickResult result = membership_.Tick();
  HandleDeadServers(result.dead);
  ProbeSuspected(result.suspected);
}

void CoordinatorService::Stalled(absl::Duration duration) { membership_.Stalled(duration); }

void CoordinatorService::Shutdown() { membership_.Shutdown(); }

void CoordinatorService::HandleDeadServers(const std::vector<MembershipManager::DeadServer>& dead) {
  for (const MembershipManager::DeadServer& server : dead) {
    // Recovery is pointless once a stripe lost more than r members: say so at once and end
    // the job, rather than leave replacements waiting for members that are gone.
    if (membership_.EndedOrDataLost()) return;
    const ServerDeadHandler handler = failures_.server_dead_handler();
    if (handler && handler(server.id)) {
      membership_.Advance();
    } else {
      membership_.Fail(absl::StrCat(server.why, "; no recovery for it (fault_tolerance.mode '",
                                    ToString(membership_.config().mode), "')"));
    }
  }
}

void CoordinatorService::ProbeSuspected(const std::vector<NodeRef>& servers) {
  for (const NodeRef& node : servers) {
    if (!failures_.ProcessGoneAt(node.address)) continue;
    HandleDeadServers(membership_.DeclareGone(node));
  }
}

void CoordinatorService::SetServerDeadHandler(ServerDeadHandler handler) {
  failures_.SetServerDeadHandler(std::move(handler));
}

void CoordinatorService::SetScrubber(Scrubber scrubber) {
  scrubs_.SetScrubber(std::move(scrubber));
}

absl::Status CoordinatorService::Scrub(const v1::ScrubRequest& request,
                                       v1::ScrubReport* report) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  return scrubs_.Scrub(report);
}

void CoordinatorService::RunPendingScrub() { scrubs_.RunPendingScrub(); }

void CoordinatorService::SetCheckpointer(Checkpointer checkpointer) {
  checkpoints_.SetCheckpointer(std::move(checkpointer));
}

absl::Status CoordinatorService::Checkpoint(const v1::CheckpointRequest& request,
                                            v1::CheckpointReport* report) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  return checkpoints_.Checkpoint(report);
}

void CoordinatorService::SetPruner(Pruner pruner) { checkpoints_.SetPruner(std::move(pruner)); }

void CoordinatorService::RunPendingCheckpoint() { checkpoints_.RunPendingCheckpoint(); }

void CoordinatorService::RunPeriodicCheckpoint() { checkpoints_.RunPeriodicCheckpoint(); }

void CoordinatorService::SetReloader(Reloader reloader) {
  checkpoints_.SetReloader(std::move(reloader));
}

bool CoordinatorService::BeginRollback() { return checkpoints_.BeginRollback(); }

void CoordinatorService::RunPendingRollback() { checkpoints_.RunPendingRollback(); }

absl::Status CoordinatorService::SetStateSaver(StateSaver saver) {
  membership_.SetStateSaver(std::move(saver));
  return absl::OkStatus();
}

absl::Status CoordinatorService::Restore(const v1::CoordinatorState& state) {
  // The table first: it is what checks that the state fits the spec (nothing changes else).
  RETURN_IF_ERROR(membership_.Restore(state));
  failures_.Restore(state);
  checkpoints_.Restore(state);
  scrubs_.Restore(state);
  return absl::OkStatus();
}

uint64_t CoordinatorService::term() const { return membership_.term(); }
v1::JobPhase CoordinatorService::phase() const { return membership_.phase(); }
std::string CoordinatorService::error() const { return membership_.error(); }
bool CoordinatorService::data_lost() const { return membership_.data_lost(); }
uint64_t CoordinatorService::epoch() const { return membership_.epoch(); }

void CoordinatorService::GetClusterMap(v1::ClusterMap* map) const {
  membership_.GetClusterMap(map);
}

}  // namespace ecps

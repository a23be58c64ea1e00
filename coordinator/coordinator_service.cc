#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_phase.h"
#include "proto/coordinator_state.pb.h"
#include "proto/ecps.pb.h"
#include "domain/placement.h"
#include "runtime/rpc.h"
#include "runtime/status_macros.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

bool IsFinal(v1::JobPhase phase) { return phase == v1::JOB_FINISHED || phase == v1::JOB_FAILED; }

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
  const FaultToleranceSection& ft = spec.fault_tolerance;
  config.mode = ft.mode;
  switch (ft.mode) {
    case FaultToleranceMode::kNone:
    case FaultToleranceMode::kCheckpoint:
      config.k = 1;
      config.r = 0;
      break;
    case FaultToleranceMode::kReplication:
      config.k = 1;
      config.r = ft.r;
      break;
    case FaultToleranceMode::kErasureCode:
      config.k = ft.k;
      config.r = ft.r;
      break;
  }
  if (config.k < 1 || config.r < 0 || config.k + config.r > config.servers) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault_tolerance: k=", config.k, " r=", config.r, " needs k >= 1, r >= 0 ",
                     "and k + r <= cluster.servers (", config.servers, ")"));
  }

  FailureDetector::Options detector_options;
  detector_options.heartbeat_timeout = options.heartbeat_timeout;
  detector_options.suspicion_timeout = options.suspicion_timeout;
  return std::unique_ptr<CoordinatorService>(new CoordinatorService(
      spec, std::move(token), clock, options, std::move(config), detector_options));
}

CoordinatorService::CoordinatorService(const JobSpec& spec, std::string token, const Clock* clock,
                                       CoordinatorServiceOptions options, Membership::Config config,
                                       FailureDetector::Options detector_options)
    : job_name_(spec.job.name),
      gatekeeper_(std::move(token)),
      clock_(clock),
      options_(options),
      created_(clock->Now()),
      membership_(std::move(config)),
      detector_(clock, detector_options),
      progress_(spec.cluster.workers, spec.job.steps),
      phase_(v1::JOB_STARTING),
      final_scrub_(KeepsRedundancy(spec.fault_tolerance.mode)),
      schedule_(spec.fault_tolerance.mode == FaultToleranceMode::kCheckpoint,
                spec.fault_tolerance.checkpoint.interval_steps,
                spec.fault_tolerance.checkpoint.interval_seconds,
                spec.fault_tolerance.checkpoint.save_final),
      history_(RowPayloadBytes(spec.model.embedding_dim, spec.optimizer.sparse.type)) {
  absl::MutexLock lock(&mu_);
  auto placement = Placement::Create(spec.cluster.servers, membership_.config().k,
                                     membership_.config().r, spec.model.table_rows);
  if (placement.ok()) placement_ = std::move(*placement);
  published_version_ = MapVersionLocked();
}

CoordinatorService::~CoordinatorService() = default;

absl::Status CoordinatorService::Register(const v1::RegisterRequest& request,
                                          v1::RegisterResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Membership::Registration reg, membership_.Register(request));
  if (!reg.repeated) {
    if (reg.replaced) detector_.Forget(*reg.replaced);
    detector_.Track(reg.node.instance);
    if (reg.node.spare) {
      spdlog::info("spare server registered at {} (pid {}, instance {}): standby", reg.node.address,
                   request.pid(), reg.node.instance);
    } else if (reg.replaced) {
      spdlog::warn("{} replaces dead instance {}; epoch now {}", DescribeNode(reg.node), *reg.replaced,
                   membership_.epoch());
      history_.Replaced(reg.node.role, reg.node.id, reg.node.instance, request.pid(),
                        /*by_spare=*/false, clock_->Now());
      if (reg.resume) {
        worker_resume_step_[reg.node.id] = reg.resume->step();
        spdlog::info("worker {} resumes the dead worker's partition after step {} at reader "
                     "position {}", reg.node.id, reg.resume->step(),
                     reg.resume->reader_position());
      }
    } else {
      spdlog::info("{} registered (pid {})", DescribeNode(reg.node), request.pid());
    }
  }
  UpdatePhaseLocked();
  PublishLocked();
  response->set_id(reg.node.id);
  response->set_state(reg.state);
  if (reg.resume) {
    *response->mutable_resume() = *reg.resume;
  } else if (reg.repeated && reg.node.role == v1::ROLE_WORKER &&
             worker_resume_step_.contains(reg.node.id)) {
    // A retried registration of a replacement gets the same resume point back.
    if (const v1::WorkerProgress* p = membership_.WorkerProgressOf(reg.node.id)) {
      *response->mutable_resume() = *p;
    }
  }
  FillMapLocked(response->mutable_map());
  return absl::OkStatus();
}

absl::Status CoordinatorService::Heartbeat(const v1::HeartbeatRequest& request,
                                           v1::HeartbeatResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Membership::HeartbeatResult result, membership_.ApplyHeartbeat(request));
  if (result.fenced) {
    spdlog::debug("fenced heartbeat from instance {} (id {})", request.instance(), request.id());
  } else {
    detector_.Heartbeat(result.node.instance);
    const absl::Time now = clock_->Now();
    if (result.node.role == v1::ROLE_SERVER && !result.node.spare &&
        history_.Open(v1::ROLE_SERVER, result.node.id)) {
      history_.Progress(result.node.id, request.server());
      if (result.state == v1::NODE_ACTIVE && history_.Recovered(v1::ROLE_SERVER, result.node.id, now)) {
        spdlog::info("server {} recovered: instance {} is active ({} rows rebuilt, {} on demand)",
                     result.node.id, result.node.instance, request.server().rebuild_rows_done(),
                     request.server().on_demand_rebuilds());
      }
    }
    if (result.node.role == v1::ROLE_WORKER) {
      auto resume = worker_resume_step_.find(result.node.id);
      if (resume != worker_resume_step_.end() &&
          (request.worker().step() > resume->second || request.worker().done()) &&
          history_.Recovered(v1::ROLE_WORKER, result.node.id, now)) {
        spdlog::info("worker {} recovered: instance {} trains again (step {})", result.node.id,
                     result.node.instance, request.worker().step());
      }
      progress_.Report(result.node.id, request.worker(), now);
      if (result.became_done) {
        // A finished worker may exit before the job ends: its silence is not a failure.
        detector_.Forget(result.node.instance);
        spdlog::info("worker {} done after {} steps", result.node.id, request.worker().step());
      }
      if (!request.worker().unhealthy().empty()) NoteUnhealthyLocked(result.node, request.worker());
      if (!request.worker().error().empty()) {
        FailJobLocked(
            absl::StrCat("worker ", result.node.id, " failed: ", request.worker().error()));
      }
    }
    UpdatePhaseLocked();
    PublishLocked();
  }
  response->set_epoch(membership_.epoch());
  response->set_phase(phase_);
  response->set_fenced(result.fenced);
  response->set_term(term_);
  response->set_kill(kill_requested_.contains(request.instance()));
  if (request.role() == v1::ROLE_WORKER) {
    rollback_.FillHeartbeat(request.id(), membership_.num_workers(), response);
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::Kill(const v1::KillRequest& request,
                                      v1::KillResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NodeRef node, membership_.Holder(request.role(), request.id()));
  const std::optional<v1::NodeState> state = membership_.StateOf(node.instance);
  if (!state || *state == v1::NODE_DEAD || *state == v1::NODE_FINISHED) {
    return absl::FailedPreconditionError(
        absl::StrCat(NodeName(node), " has no live instance to kill"));
  }
  kill_requested_.insert(node.instance);
  SaveChangeLocked();  // before the admin hears it was asked
  const std::string sender =
      request.header().sender().empty() ? "an admin" : request.header().sender();
  spdlog::warn("{}: kill requested by {}; it dies at its next heartbeat", DescribeNode(node), sender);
  response->set_instance(node.instance);
  response->set_pid(node.pid);
  return absl::OkStatus();
}

bool CoordinatorService::ReplaceServer(int server_id) {
  absl::MutexLock lock(&mu_);
  if (Final()) return false;
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
  detector_.Forget(*promoted->replaced);
  // The spare was heartbeating as a standby: its deadline stands (a takeover's grace with it,
  // which a spare still backing off from the old coordinator needs).
  if (!detector_.IsLive(promoted->node.instance)) detector_.Track(promoted->node.instance);
  history_.Replaced(v1::ROLE_SERVER, server_id, promoted->node.instance, promoted->node.pid,
                    /*by_spare=*/true, clock_->Now());
  spdlog::warn("spare {} (pid {}) promoted to server {}, replacing dead instance {}: recovering; "
               "epoch now {}", promoted->node.instance, promoted->node.pid, server_id,
               *promoted->replaced, membership_.epoch());
  UpdatePhaseLocked();
  PublishLocked();
  return true;
}

absl::Status CoordinatorService::Status(const v1::StatusRequest& request,
                                        v1::StatusResponse* response) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  absl::MutexLock lock(&mu_);
  const ProgressSummary summary = progress_.Summarize(clock_->Now());
  response->set_job(job_name_);
  response->set_metrics_address(metrics_address_);
  response->set_phase(phase_);
  response->set_epoch(membership_.epoch());
  response->set_step(summary.step);
  response->set_total_steps(summary.total_steps);
  response->set_samples(summary.samples);
  response->set_samples_per_s(summary.samples_per_s);
  response->set_loss(summary.loss);
  response->set_eval_auc(summary.eval_auc);
  response->set_eval_logloss(summary.eval_logloss);
  response->set_elapsed_s(summary.elapsed_s);
  response->set_eta_s(summary.eta_s);
  response->set_data_epoch(summary.data_epoch);
  response->set_data_epochs(summary.data_epochs);
  response->set_abft_detections(summary.abft_detections);
  response->set_mode(ToString(membership_.config().mode));
  response->set_k(membership_.config().k);
  response->set_r(membership_.config().r);
  response->set_error(error_);
  response->set_data_lost(data_lost_);
  if (last_scrub_ != nullptr) *response->mutable_scrub() = *last_scrub_;
  if (last_checkpoint_ != nullptr) *response->mutable_checkpoint() = *last_checkpoint_;
  history_.Fill(response);
  membership_.FillStatusNodes(
      [this](const std::string& instance)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { return detector_.SinceHeartbeat(instance); },
      response);
  // A worker's own samples_per_s is over its last heartbeat interval, which a few steps more
  // or less swing; show the rate the job's is the sum of.
  for (v1::NodeInfo& node : *response->mutable_nodes()) {
    if (node.role() == v1::ROLE_WORKER) {
      node.mutable_worker()->set_samples_per_s(progress_.WorkerRate(node.id()));
    }
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::WatchClusterMap(
    const v1::WatchClusterMapRequest& request, const std::function<bool()>& cancelled,
    const std::function<bool(const v1::ClusterMap&)>& send) {
  RETURN_IF_ERROR(gatekeeper_.Authenticate(request.header()));
  uint64_t sent_version;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t epoch = membership_.epoch();
    const bool newer =
        epoch > request.known_epoch() ||
        (epoch == request.known_epoch() && MapVersionLocked() > request.known_version());
    // Pretend the client already has the current version when it is not newer.
    sent_version = newer ? 0 : MapVersionLocked();
  }
  while (true) {
    std::shared_ptr<const v1::ClusterMap> map;
    {
      absl::MutexLock lock(&mu_);
      while (!shutdown_ && MapVersionLocked() == sent_version) {
        if (cancelled()) return absl::OkStatus();
        map_changed_.WaitWithTimeout(&mu_, options_.watch_wakeup);
      }
      if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
      map = SharedMapLocked();
      sent_version = MapVersionLocked();
    }
    if (cancelled() || !send(*map)) return absl::OkStatus();
  }
}

void CoordinatorService::Tick() {
  std::vector<DeadServer> dead;
  std::vector<NodeRef> suspected;
  {
    absl::MutexLock lock(&mu_);
    if (Final()) return;
    dead = DetectLocked();
    suspected = SuspectedServersLocked();
    if (phase_ == v1::JOB_STARTING && clock_->Now() - created_ > options_.startup_timeout) {
      FailJobLocked(
          absl::StrCat("startup timeout: after ", absl::FormatDuration(options_.startup_timeout),
                       " the job still waits for ", absl::StrJoin(membership_.Waiting(), ", ")));
    }
    PublishLocked();
  }
  HandleDeadServers(dead);
  ProbeSuspected(suspected);
}

void CoordinatorService::Stalled(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  DeafLocked(duration, "its threads were not scheduled");
}

void CoordinatorService::DeafLocked(absl::Duration duration, const char* why) {
  detector_.Deaf(duration);
  // Worth a line once it is a good part of a timeout; shorter ones are routine.
  if (duration >= detector_.options().heartbeat_timeout / 4) {
    spdlog::warn("coordinator: heard nobody for {:.2f} s ({}); every node's heartbeat deadline "
                 "moves on by that much", absl::ToDoubleSeconds(duration), why);
  }
}

void CoordinatorService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  map_changed_.SignalAll();
}

void CoordinatorService::SetServerDeadHandler(ServerDeadHandler handler) {
  absl::MutexLock lock(&mu_);
  server_dead_handler_ = std::move(handler);
}

bool CoordinatorService::data_lost() const {
  absl::MutexLock lock(&mu_);
  return data_lost_;
}

v1::JobPhase CoordinatorService::phase() const {
  absl::MutexLock lock(&mu_);
  return phase_;
}

std::string CoordinatorService::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

uint64_t CoordinatorService::epoch() const {
  absl::MutexLock lock(&mu_);
  return membership_.epoch();
}

void CoordinatorService::GetClusterMap(v1::ClusterMap* map) const {
  absl::MutexLock lock(&mu_);
  FillMapLocked(map);
}

bool CoordinatorService::Final() const { return IsFinal(phase_); }

WorkerReports CoordinatorService::WorkerReportsLocked() const {
  WorkerReports reports;
  for (int w = 0; w < membership_.num_workers(); ++w) {
    reports.push_back(membership_.WorkerProgressOf(w));
  }
  return reports;
}

void CoordinatorService::SetPhaseLocked(v1::JobPhase phase) {
  if (phase == phase_) return;
  // Leaving STARTING (for RUNNING, or straight on to FINISHED) starts the job's clock.
  const bool started = phase_ == v1::JOB_STARTING && phase != v1::JOB_FAILED;
  phase_ = phase;
  ++phase_changes_;
  const absl::Time now = clock_->Now();
  if (started || phase == v1::JOB_RUNNING) progress_.MarkRunning(now);
  if (IsFinal(phase)) progress_.MarkEnded(now);
}

void CoordinatorService::UpdatePhaseLocked() {
  PhaseFacts facts;
  facts.phase = phase_;
  facts.all_servers_active = membership_.AllServersActive();
  facts.all_workers_registered = membership_.AllWorkersRegistered();
  facts.any_server_recovering = membership_.AnyServerRecovering();
  facts.all_workers_done = membership_.AllWorkersDone();
  facts.final_checkpoint_wanted = checkpointer_ && schedule_.final_wanted();
  facts.final_scrub_wanted = scrubber_ && final_scrub_.wanted();
  const PhaseDecision next = NextPhase(facts);
  if (next.save_final_checkpoint) schedule_.RequestFinal();  // RunPendingCheckpoint saves it
  if (next.run_final_scrub) final_scrub_.Request();  // RunPendingScrub finishes the job
  const v1::JobPhase from = phase_;
  SetPhaseLocked(next.phase);
  if (from == v1::JOB_STARTING && next.phase != v1::JOB_STARTING) {
    spdlog::info(
        "job '{}' running: {} servers active, {} workers registered ({:.1f} s after start)",
        job_name_, membership_.num_servers(), membership_.num_workers(),
        absl::ToDoubleSeconds(clock_->Now() - created_));
  }
  if (from != v1::JOB_RECOVERING && next.phase == v1::JOB_RECOVERING) {
    spdlog::warn("job '{}' recovering: training goes on while server {} is replaced", job_name_,
                 absl::StrJoin(RecoveringServersLocked(), ", "));
  } else if (from == v1::JOB_RECOVERING && next.phase == v1::JOB_RUNNING) {
    spdlog::info("job '{}' running: every server is active again", job_name_);
  }
  if (next.phase == v1::JOB_FINISHED && from != v1::JOB_FINISHED) {
    const ProgressSummary summary = progress_.Summarize(clock_->Now());
    spdlog::info("job '{}' finished: {} steps, {} samples in {:.1f} s", job_name_, summary.step,
                 summary.samples, summary.elapsed_s);
  }
}

void CoordinatorService::FailJobLocked(const std::string& error) {
  if (Final()) return;
  error_ = error;
  SetPhaseLocked(v1::JOB_FAILED);
  spdlog::error("job '{}' failed: {}", job_name_, error);
}

std::vector<std::string> CoordinatorService::RecoveringServersLocked() const {
  std::vector<std::string> ids;
  v1::ClusterMap map;
  membership_.FillClusterMap(&map);
  for (const v1::NodeInfo& s : map.servers()) {
    if (s.state() == v1::NODE_RECOVERING || s.state() == v1::NODE_DEAD) {
      ids.push_back(absl::StrCat(s.id()));
    }
  }
  return ids;
}

uint64_t CoordinatorService::MapVersionLocked() const {
  // Both counters only grow, so their sum changes exactly when the map content does.
  return membership_.version() + phase_changes_;
}

void CoordinatorService::FillMapLocked(v1::ClusterMap* map) const {
  membership_.FillClusterMap(map);
  map->set_phase(phase_);
  map->set_version(MapVersionLocked());
  map->set_term(term_);
}

std::shared_ptr<const v1::ClusterMap> CoordinatorService::SharedMapLocked() {
  if (shared_map_ == nullptr || shared_map_->version() != MapVersionLocked()) {
    auto map = std::make_shared<v1::ClusterMap>();
    FillMapLocked(map.get());
    shared_map_ = std::move(map);
  }
  return shared_map_;
}

void CoordinatorService::PublishLocked() {
  const uint64_t version = MapVersionLocked();
  if (saver_ &&
      (version != published_version_ || clock_->Now() - last_saved_ >= absl::Seconds(1))) {
    SaveStateLocked();
  }
  if (version != published_version_) {
    published_version_ = version;
    map_changed_.SignalAll();
  }
}

void CoordinatorService::SaveStateLocked() {
  v1::CoordinatorState state;
  state.set_term(term_);
  membership_.Save(&state);
  state.set_phase(phase_);
  state.set_phase_changes(phase_changes_);
  state.set_error(error_);
  state.set_data_lost(data_lost_);
  for (const v1::FailureEvent& event : history_.events()) *state.add_failures() = event;
  for (const auto& [worker, step] : worker_resume_step_) {
    (*state.mutable_worker_resume_step())[worker] = step;
  }
  for (const std::string& instance : kill_requested_) state.add_kill_requested(instance);
  if (last_scrub_ != nullptr) *state.mutable_last_scrub() = *last_scrub_;
  if (last_checkpoint_ != nullptr) *state.mutable_last_checkpoint() = *last_checkpoint_;
  state.set_rollback_generation(rollback_.generation());
  state.set_rollback_reloaded(rollback_.reloaded());
  *state.mutable_rollback_to() = rollback_.reloaded_to();
  state.set_checkpoint_last_step(schedule_.last_step());
  if (schedule_.last_time()) {
    state.set_checkpoint_last_unix_micros(absl::ToUnixMicros(*schedule_.last_time()));
  }
  state.set_final_checkpoint_done(schedule_.final_done());
  last_saved_ = clock_->Now();
  if (absl::Status saved = saver_(state); !saved.ok()) {
    spdlog::error("coordinator: cannot save its state (a takeover would start from an older "
                  "one): {}", saved.ToString());
  }
  // The save holds mu_, which every heartbeat needs: a slow disk (an fsync) or a slow etcd is
  // time in which nobody could be heard.
  DeafLocked(clock_->Now() - last_saved_, "its state was being saved");
}

void CoordinatorService::SaveChangeLocked() {
  if (saver_) SaveStateLocked();
}

absl::Status CoordinatorService::SetStateSaver(StateSaver saver) {
  absl::MutexLock lock(&mu_);
  saver_ = std::move(saver);
  SaveStateLocked();
  return absl::OkStatus();
}

absl::Status CoordinatorService::Restore(const v1::CoordinatorState& state) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(membership_.Restore(state));
  term_ = state.term() + 1;
  phase_ = state.phase();
  phase_changes_ = state.phase_changes();
  error_ = state.error();
  data_lost_ = state.data_lost();
  history_.Restore({state.failures().begin(), state.failures().end()});
  worker_resume_step_.clear();
  for (const auto& [worker, step] : state.worker_resume_step()) worker_resume_step_[worker] = step;
  kill_requested_ = {state.kill_requested().begin(), state.kill_requested().end()};
  last_scrub_ = state.has_last_scrub() ? std::make_unique<v1::ScrubReport>(state.last_scrub())
                                       : nullptr;
  last_checkpoint_ = state.has_last_checkpoint()
                         ? std::make_unique<v1::CheckpointReport>(state.last_checkpoint())
                         : nullptr;
  rollback_.Restore(state.rollback_generation(), state.rollback_reloaded(), state.rollback_to());
  std::optional<absl::Time> last_periodic;
  if (state.checkpoint_last_unix_micros() != 0) {
    last_periodic = absl::FromUnixMicros(state.checkpoint_last_unix_micros());
  }
  schedule_.Restore(state.checkpoint_last_step(), last_periodic, state.final_checkpoint_done());
  const absl::Time now = clock_->Now();
  if (phase_ != v1::JOB_STARTING) progress_.MarkRunning(now);
  for (int w = 0; w < membership_.num_workers(); ++w) {
    absl::StatusOr<NodeRef> holder = membership_.Holder(v1::ROLE_WORKER, w);
    if (!holder.ok()) continue;
    progress_.Report(w, *membership_.WorkerProgressOf(w), now);
    if (membership_.StateOf(holder->instance) == v1::NODE_DEAD) progress_.Stopped(w);
  }
  // Every live node gets a fresh deadline, from the takeover's start and its grace (a
  // finished worker may have exited: its silence is no failure).
  for (const std::string& instance : membership_.LiveInstances()) {
    if (membership_.StateOf(instance) != v1::NODE_FINISHED) {
      detector_.Track(instance, kTakeoverGrace);
    }
  }
  published_version_ = MapVersionLocked();
  shared_map_.reset();
  spdlog::warn("coordinator takes job '{}' over as term {}: phase {}, epoch {}, {} live nodes",
               job_name_, term_, v1::JobPhase_Name(phase_), membership_.epoch(),
               membership_.LiveInstances().size());
  return absl::OkStatus();
}

uint64_t CoordinatorService::term() const {
  absl::MutexLock lock(&mu_);
  return term_;
}

}  // namespace ecps

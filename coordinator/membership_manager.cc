#include "coordinator/membership_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_phase.h"
#include "proto/coordinator_state.pb.h"
#include "runtime/status_macros.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

bool IsFinal(v1::JobPhase phase) { return phase == v1::JOB_FINISHED || phase == v1::JOB_FAILED; }

}  // namespace

MembershipManager::MembershipManager(const Clock* clock, Membership::Config config,
                                     Options options, FailureManager* failures,
                                     ProgressManager* progress, Hooks hooks)
    : clock_(clock),
      config_(config),
      options_(std::move(options)),
      failures_(failures),
      progress_(progress),
      hooks_(std::move(hooks)),
      created_(clock->Now()),
      membership_(std::move(config)) {
  absl::MutexLock lock(&mu_);
  published_version_ = MapVersionLocked();
}

absl::Status MembershipManager::Register(const v1::RegisterRequest& request,
                                         v1::RegisterResponse* response) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Membership::Registration reg, membership_.Register(request));
  if (!reg.repeated) failures_->Registered(reg, request.pid(), membership_.epoch());
  UpdatePhaseLocked();
  PublishLocked();
  response->set_id(reg.node.id);
  response->set_state(reg.state);
  if (reg.resume) {
    *response->mutable_resume() = *reg.resume;
  } else if (reg.repeated && reg.node.role == v1::ROLE_WORKER && failures_->Resumes(reg.node.id)) {
    // A retried registration of a replacement gets the same resume point back.
    if (const v1::WorkerProgress* p = membership_.WorkerProgressOf(reg.node.id)) {
      *response->mutable_resume() = *p;
    }
  }
  FillMapLocked(response->mutable_map());
  return absl::OkStatus();
}

absl::Status MembershipManager::Heartbeat(const v1::HeartbeatRequest& request,
                                          v1::HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Membership::HeartbeatResult result, membership_.ApplyHeartbeat(request));
  if (result.fenced) {
    spdlog::debug("fenced heartbeat from instance {} (id {})", request.instance(), request.id());
  } else {
    failures_->Heartbeat(result, request);
    if (result.node.role == v1::ROLE_WORKER) {
      progress_->Report(result.node.id, request.worker());
      if (result.became_done) {
        spdlog::info("worker {} done after {} steps", result.node.id, request.worker().step());
      }
      if (!request.worker().unhealthy().empty()) {
        failures_->NoteUnhealthy(result.node, request.worker().unhealthy());
      }
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
  response->set_kill(failures_->KillRequested(request.instance()));
  return absl::OkStatus();
}

absl::Status MembershipManager::WatchClusterMap(
    const v1::WatchClusterMapRequest& request, const std::function<bool()>& cancelled,
    const std::function<bool(const v1::ClusterMap&)>& send) {
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

void MembershipManager::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  map_changed_.SignalAll();
}

void MembershipManager::FillStatus(v1::StatusResponse* response) const {
  absl::MutexLock lock(&mu_);
  response->set_job(options_.job_name);
  response->set_metrics_address(metrics_address_);
  response->set_phase(phase_);
  response->set_epoch(membership_.epoch());
  response->set_mode(ToString(config_.mode));
  response->set_k(config_.k);
  response->set_r(config_.r);
  response->set_error(error_);
  response->set_data_lost(data_lost_);
  membership_.FillStatusNodes(
      [this](const std::string& instance) { return failures_->SinceHeartbeat(instance); },
      response);
  *response->mutable_replaced_servers_scrub() = membership_.replaced_servers_scrub();
}

void MembershipManager::set_metrics_address(std::string address) {
  absl::MutexLock lock(&mu_);
  metrics_address_ = std::move(address);
}

JobView MembershipManager::View(v1::ClusterMap* map) const {
  absl::MutexLock lock(&mu_);
  JobView view;
  view.phase = phase_;
  view.final = FinalLocked();
  view.all_servers_active = membership_.AllServersActive();
  view.any_server_recovering = membership_.AnyServerRecovering();
  view.all_workers_done = membership_.AllWorkersDone();
  if (map != nullptr) FillMapLocked(map);
  return view;
}

void MembershipManager::Advance() {
  absl::MutexLock lock(&mu_);
  UpdatePhaseLocked();
  PublishLocked();
}

void MembershipManager::Fail(const std::string& error) {
  absl::MutexLock lock(&mu_);
  FailJobLocked(error);
  PublishLocked();
}

void MembershipManager::SaveChange() {
  absl::MutexLock lock(&mu_);
  SaveChangeLocked();
}

void MembershipManager::ReadWorkers(const std::function<void(const WorkerReports&)>& read) const {
  absl::MutexLock lock(&mu_);
  read(WorkerReportsLocked());
}

absl::Status MembershipManager::SaveWith(
    const std::function<absl::Status(const WorkerReports&)>& change) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(change(WorkerReportsLocked()));
  SaveChangeLocked();
  return absl::OkStatus();
}

WorkerReports MembershipManager::WorkerReportsLocked() const {
  WorkerReports reports;
  reports.reserve(membership_.num_workers());
  for (int w = 0; w < membership_.num_workers(); ++w) {
    reports.push_back(membership_.WorkerProgressOf(w));
  }
  return reports;
}

bool MembershipManager::FinalLocked() const { return IsFinal(phase_); }

void MembershipManager::SetPhaseLocked(v1::JobPhase phase) {
  if (phase == phase_) return;
  const v1::JobPhase from = phase_;
  phase_ = phase;
  ++phase_changes_;
  progress_->PhaseChanged(from, phase);
}

void MembershipManager::UpdatePhaseLocked() {
  PhaseFacts facts;
  facts.phase = phase_;
  facts.all_servers_active = membership_.AllServersActive();
  facts.all_workers_registered = membership_.AllWorkersRegistered();
  facts.any_server_recovering = membership_.AnyServerRecovering();
  facts.all_workers_done = membership_.AllWorkersDone();
  // Asked only when it matters: each takes another manager's lock.
  if (facts.all_workers_done) {
    facts.final_checkpoint_wanted = hooks_.final_checkpoint_wanted();
    facts.final_scrub_wanted = hooks_.final_scrub_wanted();
  }
  const PhaseDecision next = NextPhase(facts);
  if (next.save_final_checkpoint) hooks_.request_final_checkpoint();
  if (next.run_final_scrub) hooks_.request_final_scrub();
  const v1::JobPhase from = phase_;
  SetPhaseLocked(next.phase);
  LogPhaseChangeLocked(from, next.phase);
}

void MembershipManager::LogPhaseChangeLocked(v1::JobPhase from, v1::JobPhase to) {
  const std::string& job = options_.job_name;
  if (from == v1::JOB_STARTING && to != v1::JOB_STARTING) {
    spdlog::info(
        "job '{}' running: {} servers active, {} workers registered ({:.1f} s after start)", job,
        membership_.num_servers(), membership_.num_workers(),
        absl::ToDoubleSeconds(clock_->Now() - created_));
  }
  if (from != v1::JOB_RECOVERING && to == v1::JOB_RECOVERING) {
    spdlog::warn("job '{}' recovering: training goes on while server {} is replaced", job,
                 absl::StrJoin(RecoveringServersLocked(), ", "));
  } else if (from == v1::JOB_RECOVERING && to == v1::JOB_RUNNING) {
    spdlog::info("job '{}' running: every server is active again", job);
  }
  if (to == v1::JOB_FINISHED && from != v1::JOB_FINISHED) {
    const ProgressSummary summary = progress_->Summarize();
    spdlog::info("job '{}' finished: {} steps, {} samples in {:.1f} s", job, summary.step,
                 summary.samples, summary.elapsed_s);
  }
}

void MembershipManager::FailJobLocked(const std::string& error) {
  if (FinalLocked()) return;
  error_ = error;
  SetPhaseLocked(v1::JOB_FAILED);
  spdlog::error("job '{}' failed: {}", options_.job_name, error);
}

std::vector<std::string> MembershipManager::RecoveringServersLocked() const {
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

uint64_t MembershipManager::MapVersionLocked() const {
  // Both counters only grow, so their sum changes exactly when the map content does.
  return membership_.version() + phase_changes_;
}

void MembershipManager::FillMapLocked(v1::ClusterMap* map) const {
  membership_.FillClusterMap(map);
  map->set_phase(phase_);
  map->set_version(MapVersionLocked());
  map->set_term(term_);
}

std::shared_ptr<const v1::ClusterMap> MembershipManager::SharedMapLocked() {
  if (shared_map_ == nullptr || shared_map_->version() != MapVersionLocked()) {
    auto map = std::make_shared<v1::ClusterMap>();
    FillMapLocked(map.get());
    shared_map_ = std::move(map);
  }
  return shared_map_;
}

void MembershipManager::PublishLocked() {
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

void MembershipManager::SaveStateLocked() {
  v1::CoordinatorState state;
  state.set_term(term_);
  membership_.Save(&state);
  state.set_phase(phase_);
  state.set_phase_changes(phase_changes_);
  state.set_error(error_);
  state.set_data_lost(data_lost_);
  hooks_.save_parts(&state);
  last_saved_ = clock_->Now();
  if (absl::Status saved = saver_(state); !saved.ok()) {
    spdlog::error("coordinator: cannot save its state (a takeover would start from an older "
                  "one): {}", saved.ToString());
  }
  // The save holds mu_, which every heartbeat needs: a slow disk (an fsync) or a slow etcd is
  // time in which nobody could be heard.
  failures_->Deaf(clock_->Now() - last_saved_, "its state was being saved");
}

void MembershipManager::SaveChangeLocked() {
  if (saver_) SaveStateLocked();
}

void MembershipManager::SetStateSaver(StateSaver saver) {
  absl::MutexLock lock(&mu_);
  saver_ = std::move(saver);
  SaveStateLocked();
}

absl::Status MembershipManager::Restore(const v1::CoordinatorState& state) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(membership_.Restore(state));
  term_ = state.term() + 1;
  phase_ = state.phase();
  phase_changes_ = state.phase_changes();
  error_ = state.error();
  data_lost_ = state.data_lost();
  if (phase_ != v1::JOB_STARTING) progress_->MarkRunning();
  for (int w = 0; w < membership_.num_workers(); ++w) {
    absl::StatusOr<NodeRef> holder = membership_.Holder(v1::ROLE_WORKER, w);
    if (!holder.ok()) continue;
    progress_->Report(w, *membership_.WorkerProgressOf(w));
    if (membership_.StateOf(holder->instance) == v1::NODE_DEAD) progress_->Stopped(w);
  }
  // Every live node gets a fresh deadline, from the takeover's start and its grace (a
  // finished worker may have exited: its silence is no failure).
  for (const std::string& instance : membership_.LiveInstances()) {
    if (membership_.StateOf(instance) != v1::NODE_FINISHED) {
      failures_->Track(instance, kTakeoverGrace);
    }
  }
  published_version_ = MapVersionLocked();
  shared_map_.reset();
  spdlog::warn("coordinator takes job '{}' over as term {}: phase {}, epoch {}, {} live nodes",
               options_.job_name, term_, v1::JobPhase_Name(phase_), membership_.epoch(),
               membership_.LiveInstances().size());
  return absl::OkStatus();
}

uint64_t MembershipManager::term() const {
  absl::MutexLock lock(&mu_);
  return term_;
}

v1::JobPhase MembershipManager::phase() const {
  absl::MutexLock lock(&mu_);
  return phase_;
}

std::string MembershipManager::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

bool MembershipManager::data_lost() const {
  absl::MutexLock lock(&mu_);
  return data_lost_;
}

uint64_t MembershipManager::epoch() const {
  absl::MutexLock lock(&mu_);
  return membership_.epoch();
}

void MembershipManager::GetClusterMap(v1::ClusterMap* map) const {
  absl::MutexLock lock(&mu_);
  FillMapLocked(map);
}

}  // namespace ecps

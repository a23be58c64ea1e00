#include "worker/worker_lifecycle.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "checkpoint/layout.h"
#include "kernels/abft.h"
#include "kernels/dense_ops.h"
#include "kernels/dlrm.h"
#include "domain/spec_config.h"
#include "runtime/error_kind.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"
#include "worker/gpu_plugin_loader.h"
#include "worker/ps_client.h"

namespace ecps {
namespace {

// Whether every server of `map` serves (a RECOVERING one does, rebuilding rows on demand)
// while the job runs or recovers: a replacement worker may start while a server recovers;
// a dead slot waits for its replacement.
bool ServersServing(const v1::ClusterMap& map, int servers) {
  if (map.phase() != v1::JOB_RUNNING && map.phase() != v1::JOB_RECOVERING) return false;
  if (map.servers_size() != servers) return false;
  for (const auto& s : map.servers()) {
    if (s.state() != v1::NODE_ACTIVE && s.state() != v1::NODE_RECOVERING) return false;
  }
  return true;
}

bool PositionsCountBatches(const JobSpec& spec) {
  return spec.data.source == DataSourceType::kSynthetic;
}

// Says how to start worker `id` when OpenBLAS did not recognise this CPU: a warning when
// the layers' GEMMs go to OpenBLAS, a note when they go to oneDNN.
void AdviseOpenBlasCore(int id) {
  std::string chosen;
  const std::string core = OpenBlasCoreAdvice(&chosen);
  if (core.empty()) return;
  // With oneDNN the layers never call OpenBLAS; without it this is the step's speed.
  const bool used = CurrentGemmLibrary() == GemmLibrary::kOpenBlas;
  const std::string message = absl::StrCat(
      "worker ", id, ": OpenBLAS did not recognise this CPU and runs its ", chosen,
      " kernels, though the CPU has wider vectors; start the worker with OPENBLAS_CORETYPE=", core,
      " in its environment");
  if (used) {
    spdlog::warn("{} (its GEMMs are several times slower as they are)", message);
  } else {
    spdlog::info("{} (unused: the layers' GEMMs go to oneDNN)", message);
  }
}

}  // namespace

bool IsReplacement(const v1::WorkerProgress& resume) {
  return resume.step() > 0 || resume.reader_position() > 0;
}

int64_t OwnStep(int64_t step, int64_t position, int64_t batch_size,
                bool positions_count_batches) {
  if (positions_count_batches && batch_size > 0 && position > 0 && position % batch_size == 0) {
    return position / batch_size;
  }
  return step;
}

ResumePlan PlanResume(const ResumeInputs& in) {
  ResumePlan plan;
  plan.step = in.registered.step();
  plan.position = in.registered.reader_position();
  if (IsReplacement(in.registered)) {
    plan.from = ResumePlan::From::kReplacement;
    plan.resume = true;
    return plan;
  }
  if (!in.checkpoint.has_value()) return plan;
  plan.resume = true;
  plan.step = in.checkpoint->step;
  plan.position = 0;
  const auto& positions = in.checkpoint->reader_positions;
  if (static_cast<int>(positions.size()) == in.workers && in.worker_id >= 0 &&
      in.worker_id < in.workers) {
    plan.from = ResumePlan::From::kCheckpoint;
    plan.position = positions[in.worker_id];
    plan.step = OwnStep(plan.step, plan.position, in.batch_size, in.positions_count_batches);
  } else {
    plan.from = ResumePlan::From::kCheckpointRepartitioned;
  }
  return plan;
}

ResumePlan PlanRollbackResume(const v1::Rollback& target, int64_t batch_size,
                              bool positions_count_batches) {
  ResumePlan plan;
  plan.from = ResumePlan::From::kCheckpoint;
  plan.resume = true;
  plan.position = std::max<int64_t>(target.reader_position(), 0);
  plan.step = OwnStep(target.step(), plan.position, batch_size, positions_count_batches);
  return plan;
}

bool RollbackTracker::Observe(const v1::Rollback& rollback, bool first_response) {
  if (rollback.generation() == 0) return false;
  absl::MutexLock lock(&mu_);
  latest_ = rollback;
  const uint64_t generation = rollback.generation();
  bool over = false;
  if (first_response && rollback.ready()) {
    handled_.store(generation);  // over before this process trained
    over = true;
  }
  if (generation > wanted_.load()) wanted_.store(generation);
  if (wanted_.load() > handled_.load()) halt_.store(true);
  return over;
}

std::optional<v1::Rollback> RollbackTracker::TakeReady(uint64_t* generation) {
  absl::MutexLock lock(&mu_);
  if (wanted_.load() > *generation) *generation = wanted_.load();  // another failure meanwhile
  if (latest_.generation() != *generation || !latest_.ready()) return std::nullopt;
  handled_.store(*generation);
  halt_.store(false);
  return latest_;
}

WorkerLifecycle::WorkerLifecycle(const WorkerOptions& options, std::string instance,
                                 CoordinatorLink* coordinator, std::atomic<bool>* stop)
    : options_(options),
      sender_("worker-" + std::to_string(options.id)),
      instance_(std::move(instance)),
      coordinator_(coordinator),
      stop_(stop),
      grace_(std::chrono::milliseconds(options.spec.cluster.heartbeat_interval_ms),
             std::chrono::seconds(options.spec.cluster.coordinator_grace_s),
             std::chrono::steady_clock::now()) {}

absl::StatusOr<v1::RegisterResponse> WorkerLifecycle::Register() {
  auto registered =
      coordinator_->Register(v1::ROLE_WORKER, "", options_.id, instance_,
                             options_.spec.cluster.connect_timeout_s * 1000);
  if (!registered.ok()) {
    return absl::Status(registered.status().code(),
                        absl::StrCat("cannot register with ", options_.coordinator, ": ",
                                     registered.status().message()));
  }
  return registered;
}

absl::Status WorkerLifecycle::PlanStart(const v1::RegisterResponse& registered) {
  const JobSpec& spec = options_.spec;
  ResumeInputs inputs;
  inputs.registered = registered.resume();
  inputs.workers = spec.cluster.workers;
  inputs.worker_id = options_.id;
  inputs.batch_size = spec.data.batch_size;
  inputs.positions_count_batches = PositionsCountBatches(spec);
  std::string dir;
  if (!IsReplacement(inputs.registered) && !spec.job.resume_from.empty()) {
    auto resolved = ResolveCheckpointDir(spec.job.resume_from);
    auto manifest =
        resolved.ok() ? ReadManifest(*resolved) : absl::StatusOr<Manifest>(resolved.status());
    if (!manifest.ok()) {
      return absl::Status(manifest.status().code(),
                          absl::StrCat("cannot resume: ", manifest.status().message()));
    }
    dir = *resolved;
    inputs.checkpoint = CheckpointResumePoint{manifest->layout.step, manifest->reader_positions};
  }
  plan_ = PlanResume(inputs);
  const v1::WorkerProgress& resume = inputs.registered;
  switch (plan_.from) {
    case ResumePlan::From::kStart:
      return absl::OkStatus();
    case ResumePlan::From::kReplacement:
      board_.Step(resume.step(), resume.samples(), resume.loss(), resume.reader_position(),
                  resume.bad_lines());
      board_.DataEpoch(resume.data_epoch(), resume.data_epochs());
      if (resume.eval_auc() > 0) {
        board_.Eval(resume.eval_step(), resume.eval_auc(), resume.eval_logloss());
      }
      board_.Snapshot();  // the first heartbeat's rate counts only this process's samples
      spdlog::warn("{}: replacing a dead worker; resuming after step {} at reader position {}",
                   sender_, resume.step(), resume.reader_position());
      return absl::OkStatus();
    case ResumePlan::From::kCheckpoint:
      spdlog::info("{}: resuming from {} after step {} at reader position {}", sender_, dir,
                   plan_.step, plan_.position);
      break;
    case ResumePlan::From::kCheckpointRepartitioned:
      spdlog::warn(
          "{}: resuming from {} after step {}; it was saved by {} workers, this job has "
          "{}: every partition starts from its beginning",
          sender_, dir, plan_.step, inputs.checkpoint->reader_positions.size(), spec.cluster.workers);
      break;
  }
  board_.Step(plan_.step, plan_.position, 0, plan_.position, 0);
  board_.Snapshot();
  return absl::OkStatus();
}

WorkerHeartbeatAction WorkerLifecycle::Heartbeat(std::chrono::steady_clock::time_point now) {
  v1::HeartbeatRequest hb;
  FillHeader(hb.mutable_header(), options_.token, coordinator_->epoch(), sender_);
  hb.set_role(v1::ROLE_WORKER);
  hb.set_id(options_.id);
  hb.set_instance(instance_);
  hb.set_state(finished_training_.load() ? v1::NODE_FINISHED : v1::NODE_ACTIVE);
  *hb.mutable_worker() = board_.Snapshot();
  auto resp = coordinator_->Heartbeat(hb);
  WorkerHeartbeatAction action = WorkerHeartbeatAction::kContinue;
  if (!resp.ok()) {
    // Training goes on with the map this worker holds; the coordinator may come back.
    grace_.Failed(now);
    if (grace_.failures() == 1) {
      spdlog::warn("{}: the coordinator does not answer ({}); training goes on, retrying with "
                   "backoff for up to {} s",
                   sender_, resp.status().ToString(), grace_.grace().count());
    }
    if (grace_.Lost(now)) {
      lost_message_ = absl::StrCat(sender_, ": ", grace_.LostMessage(options_.coordinator, now));
      int unset = -1;
      exit_code_.compare_exchange_strong(unset, 1);
      stop_->store(true);
      action = WorkerHeartbeatAction::kCoordinatorLost;
    }
  } else {
    if (grace_.failures() > 0) {
      spdlog::info("{}: the coordinator answers again after {} ms", sender_,
                   grace_.Silent(now).count());
    }
    grace_.Answered(now);
    if (resp->kill()) return WorkerHeartbeatAction::kKill;
    if (rollbacks_.Observe(resp->rollback(), first_response_)) {
      board_.Resumed(resp->rollback().generation());
    }
    first_response_ = false;
    if (resp->fenced()) {
      spdlog::warn("{}: fenced by the coordinator; exiting", sender_);
      exit_code_.store(1);
      stop_->store(true);
    } else if (resp->phase() == v1::JOB_FINISHED) {
      exit_code_.store(0);
    } else if (resp->phase() == v1::JOB_FAILED) {
      exit_code_.store(1);
      stop_->store(true);
    }
  }
  if (stop_->load()) rollbacks_.halt()->store(true);
  if (stop_->load() && exit_code_.load() < 0) exit_code_.store(1);
  return action;
}

absl::Status WorkerLifecycle::AwaitRollback(uint64_t generation) {
  board_.Paused(generation);
  spdlog::warn(
      "{}: stopped for rollback {} (a server failed); waiting for every server to reload the "
      "last checkpoint",
      sender_, generation);
  std::optional<v1::Rollback> target;
  while (true) {
    if (stop_->load()) return absl::CancelledError("worker interrupted");
    const uint64_t before = generation;
    target = rollbacks_.TakeReady(&generation);
    if (generation != before) board_.Paused(generation);
    if (target.has_value()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  plan_ = PlanRollbackResume(*target, options_.spec.data.batch_size,
                             PositionsCountBatches(options_.spec));
  board_.Rewind(generation, plan_.step, plan_.position);
  spdlog::warn("{}: rolled back to {}: resuming after step {} at reader position {}{}", sender_,
               target->dir(), plan_.step, plan_.position,
               target->reader_position() < 0 ? " (worker count differs: from the start)" : "");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GemmFaultInjector>> WorkerLifecycle::GemmFaultsFromEnvironment()
    const {
  const char* list = std::getenv("ECPS_GEMM_FAULTS");
  if (list == nullptr || *list == '\0') return nullptr;
  const char* allowed = std::getenv("ECPS_FAULT_INJECTION");
  if (allowed == nullptr || std::string(allowed) != "1") {
    spdlog::warn("{}: ECPS_GEMM_FAULTS ignored: this process was not started with "
                 "ECPS_FAULT_INJECTION=1", sender_);
    return nullptr;
  }
  auto faults = ParseGemmFaults(list);
  if (!faults.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ECPS_GEMM_FAULTS: ", faults.status().message()));
  }
  spdlog::warn("{}: fault injection: GEMM faults {} (ECPS_GEMM_FAULTS){}", sender_, list,
               options_.spec.worker.abft == AbftSetting::kOff ? ", unchecked: worker.abft is off"
                                                               : "");
  return faults;
}

absl::Status WorkerLifecycle::Train() {
  const JobSpec& spec = options_.spec;
  const int servers = spec.cluster.servers;
  auto map = coordinator_->WaitForMap(
      [servers](const v1::ClusterMap& m) { return ServersServing(m, servers); },
      std::max(600000, spec.cluster.connect_timeout_s * 1000));
  if (!map.ok()) return map.status();
  // cluster.worker_threads compute threads: the model's batch slices, pooling and gradient
  // aggregation (kernels/parallel.h); BLAS single-threaded in each.
  SetBlasThreads(1);
  AdviseOpenBlasCore(options_.id);
  auto model = Dlrm::Create(ToDlrmConfig(spec.model), spec.data.batch_size,
                            spec.cluster.worker_threads);
  if (!model.ok()) return model.status();
  auto faults = GemmFaultsFromEnvironment();
  if (!faults.ok()) return faults.status();
  if (spec.worker.abft != AbftSetting::kOff && spec.cluster.worker_device == WorkerDevice::kCpu) {
    // Measured once per worker process: the selector's machine balance (docs/abft.md).
    const MachineBalance balance = MeasureMachineBalance();
    (*model)->SetAbft(spec.worker.abft == AbftSetting::kAuto ? AbftMode::kAuto : AbftMode::kDetect,
                      balance, faults->get());
    spdlog::info("{}: abft {}: {}; {}", sender_, ToString(spec.worker.abft), balance.ToString(),
                 (*model)->AbftPlan());
  }
  // cluster.worker_device: cuda: the step's math on this machine's GPUs (before any server is
  // dialled, so that a machine without them fails at once and says why).
  std::unique_ptr<DenseMath> gpu_math;
  if (spec.cluster.worker_device == WorkerDevice::kCuda) {
    auto math = CreateCudaDenseMath(ToDlrmConfig(spec.model), spec.data.batch_size,
                                    spec.cluster.gpus_per_worker);
    if (!math.ok()) return math.status();
    gpu_math = std::move(*math);
    spdlog::info("{}: dense math on {} CUDA GPU(s)", sender_, spec.cluster.gpus_per_worker);
    if (spec.worker.abft != AbftSetting::kOff) {
      // detect and auto alike: the GPU checks every GEMM over all its rows (docs/abft.md).
      if (std::string e = gpu_math->SetAbft(true, faults->get()); !e.empty()) {
        return absl::FailedPreconditionError(absl::StrCat("worker.abft on CUDA: ", e));
      }
      spdlog::info("{}: abft {}: every MLP GEMM on the GPU checked by its global column checksums",
                   sender_, ToString(spec.worker.abft));
    }
  }
  std::vector<int64_t> sizes;
  for (const auto& t : (*model)->tensors()) sizes.push_back(t.size);
  auto ps = PsClient::Create(*map, spec.model.table_rows, spec.model.embedding_dim, sizes,
                             options_.token, sender_, spec.cluster.rpc_timeout_ms);
  if (!ps.ok()) return ps.status();
  // Follow the cluster through server failures: report an unreachable server once a second
  // at most, and retry against the latest map (a replacement, a new epoch).
  CoordinatorLink* coordinator = coordinator_;
  std::atomic<bool>* stop = stop_;
  std::atomic<bool>* halt = rollbacks_.halt();
  PsClient::FailureHandling handling;
  handling.map_source = [coordinator] { return coordinator->map(); };
  handling.on_unavailable = [coordinator](int server, const std::string& address) {
    coordinator->ReportServerUnreachable(server, "RPCs to the server fail", address);
  };
  handling.cancelled = [stop, halt] { return stop->load() || halt->load(); };
  (*ps)->SetFailureHandling(std::move(handling));
  spdlog::info("{}: training {} steps against {} servers (epoch {})", sender_, spec.job.steps,
               map->servers_size(), map->epoch());
  while (true) {
    TrainingLoop loop(spec, options_.id, ps->get(), model->get(), &board_, halt);
    if (gpu_math != nullptr) loop.UseDenseMath(gpu_math.get());
    if (plan_.resume) loop.ResumeAt(plan_.step, plan_.position);
    absl::Status trained = loop.Train();
    if (stop_->load() || !rollbacks_.pending()) return trained;
    // A rollback: this worker pushes nothing more until every server has reloaded.
    if (absl::Status rewound = AwaitRollback(rollbacks_.wanted()); !rewound.ok()) return rewound;
  }
}

void WorkerLifecycle::Finish(const absl::Status& trained, int wait_ms) {
  if (trained.ok()) {
    board_.Done();
    finished_training_.store(true);
    spdlog::info("{}: done", sender_);
  } else if (HasErrorKind(trained, ErrorKind::kUnhealthyWorker)) {
    // Not the job's failure: the coordinator declares this worker dead and replaces it.
    spdlog::error("{}: {}; stopping for a replacement", sender_, std::string(trained.message()));
    board_.Unhealthy(std::string(trained.message()));
  } else {
    spdlog::error("{}: {}", sender_, trained.ToString());
    board_.Fail(trained.ToString());
  }
  // Wait until the coordinator has seen the final report and ends the job.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (exit_code_.load() < 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int unset = -1;
  exit_code_.compare_exchange_strong(unset, trained.ok() ? 0 : 1);
}

}  // namespace ecps

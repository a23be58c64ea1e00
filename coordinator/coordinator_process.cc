#include "coordinator/coordinator_process.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "coordinator/checkpoint_job.h"
#include "coordinator/job_metrics.h"
#include "coordinator/process_probe.h"
#include "coordinator/scrub.h"
#include "google/protobuf/util/json_util.h"
#include "proto/coordinator_state.pb.h"
#include "runtime/env.h"
#include "runtime/health.h"
#include "runtime/net.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

std::vector<std::string> ServerAddresses(const v1::ClusterMap& map) {
  std::vector<std::string> addresses;
  for (const auto& s : map.servers()) addresses.push_back(s.address());
  return addresses;
}

}  // namespace

absl::Duration StartupTimeout(const CoordinatorOptions& options) {
  return absl::Milliseconds(options.startup_timeout_ms >= 0
                                ? options.startup_timeout_ms
                                : options.spec.cluster.connect_timeout_s * 1000);
}

absl::Duration TickPeriod(const CoordinatorOptions& options) {
  if (options.tick_ms > 0) return absl::Milliseconds(options.tick_ms);
  return std::clamp(absl::Milliseconds(options.spec.cluster.heartbeat_timeout_ms) / 10,
                    absl::Milliseconds(1), absl::Milliseconds(100));
}

int ServingThreads(const JobSpec& spec) {
  return std::clamp(spec.cluster.servers + spec.cluster.spares + spec.cluster.workers, 4, 256);
}

int CoordinatorExitCode(v1::JobPhase phase, bool data_lost) {
  if (phase == v1::JOB_FINISHED) return 0;
  if (phase == v1::JOB_FAILED && data_lost) return kExitDataLost;
  return 1;
}

CoordinatorProcess::CoordinatorProcess(const CoordinatorOptions& options, std::string token)
    : options_(options), token_(RoleToken(token, Role::kCoordinator)) {}

CoordinatorProcess::~CoordinatorProcess() { Shutdown(); }

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Create(
    const CoordinatorOptions& options, std::unique_ptr<StateStore> store) {
  const std::string token = options.token.empty() ? options.spec.job.token : options.token;
  if (token.empty()) {
    spdlog::warn("no job token set: every client is accepted, in any role its TLS "
                 "certificate (if any) does not fix (docs/security.md)");
  }
  std::unique_ptr<CoordinatorProcess> process(new CoordinatorProcess(options, token));
  CoordinatorServiceOptions service_options;
  service_options.startup_timeout = StartupTimeout(options);
  // A reported server whose port refuses connections died (SIGKILL, a crash): declare it at
  // once. Up to 200 ms per report, and only without the service's lock.
  service_options.process_gone = [](const std::string& address) {
    return ConnectionRefused(address, 200);
  };
  auto service =
      CoordinatorService::Create(options.spec, token, &process->clock_, service_options);
  if (!service.ok()) return service.status();
  process->service_ = std::move(service).value();
  process->glue_ = std::make_unique<GrpcCoordinator>(process->service_.get());
  if (absl::Status wired = process->WireClusterOperations(); !wired.ok()) return wired;
  if (store == nullptr && !options.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<StateStore>> log = OpenFileStateStore(options.state_dir);
    if (!log.ok()) return log.status();
    store = *std::move(log);
  }
  if (absl::Status used = process->UseStateStore(std::move(store)); !used.ok()) return used;
  return process;
}

absl::Status CoordinatorProcess::UseStateStore(std::unique_ptr<StateStore> store) {
  if (store == nullptr) return absl::OkStatus();
  absl::StatusOr<std::optional<std::string>> saved = store->Load();
  if (!saved.ok()) return saved.status();
  if (saved->has_value()) {
    v1::CoordinatorState state;
    if (!state.ParseFromString(**saved)) {
      return absl::DataLossError(
          absl::StrCat("the state in ", store->Describe(), " is not a coordinator's state"));
    }
    if (absl::Status restored = service_->Restore(state); !restored.ok()) {
      return absl::Status(restored.code(),
                          absl::StrCat("cannot take the job over from ", store->Describe(), ": ",
                                       restored.message()));
    }
  }
  state_store_ = std::move(store);
  StateStore* state_store = state_store_.get();
  // The first save happens inside SetStateSaver: a coordinator that may no longer write (its
  // lead in etcd already lost) must not start serving. Other failures are logged, as later.
  auto first_save = std::make_shared<std::optional<absl::Status>>();
  service_
      ->SetStateSaver([state_store, first_save](const v1::CoordinatorState& state) {
        absl::Status s = state_store->Save(state.SerializeAsString());
        if (!first_save->has_value()) *first_save = s;
        return s;
      })
      .IgnoreError();
  if (first_save->has_value() && absl::IsFailedPrecondition(**first_save)) {
    const absl::Status& failed = **first_save;
    return absl::Status(failed.code(), absl::StrCat("cannot save to ", state_store->Describe(),
                                                    ": ", failed.message()));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorProcess::WireClusterOperations() {
  const JobSpec& spec = options_.spec;
  const std::string token = token_;
  const int scrub_timeout_ms = spec.cluster.rpc_timeout_ms;
  service_->SetScrubber([token, scrub_timeout_ms](const v1::ClusterMap& map) {
    return ScrubServers(ServerAddresses(map), token, StampOf(map), scrub_timeout_ms);
  });

  // Checkpoints (ecps checkpoint, the final save) go to fault_tolerance.checkpoint.dir.
  absl::StatusOr<CheckpointLayout> layout = CheckpointLayoutFor(spec);
  if (!layout.ok()) return layout.status();
  const std::string checkpoint_root = spec.fault_tolerance.checkpoint.dir;
  // A server that dies mid-save is reported at once, as a worker would report it: the
  // workers wait on the frozen servers meanwhile and see nothing fail.
  CoordinatorService* svc = service_.get();
  auto report_unreachable = [svc, token](int server, const std::string& address) {
    v1::ReportFailureRequest report;
    FillHeader(report.mutable_header(), token, 0, "coordinator");
    report.set_role(v1::ROLE_SERVER);
    report.set_id(server);
    report.set_address(address);
    report.set_reason("its checkpoint save failed");
    v1::ReportFailureResponse response;
    svc->ReportFailure(report, &response).IgnoreError();
  };
  service_->SetCheckpointer(
      [token, scrub_timeout_ms, checkpoint_root, layout = *layout, report_unreachable](
          const v1::ClusterMap& map, const std::function<CheckpointProgress()>& progress) {
        return SaveCheckpointOnServers(ServerAddresses(map), token, StampOf(map),
                                       scrub_timeout_ms, checkpoint_root, layout, progress,
                                       report_unreachable);
      });
  // After each save, only the newest checkpoint.keep checkpoints stay (the one just written
  // always does).
  const int keep = spec.fault_tolerance.checkpoint.keep;
  service_->SetPruner([checkpoint_root, keep](const v1::CheckpointReport& saved) {
    return PruneCheckpoints(checkpoint_root, keep, saved.step());
  });

  // Mode checkpoint: a dead server is replaced (a spare, or a new process `ecps run` starts,
  // which loads the last checkpoint), then every server reloads it and every worker rewinds.
  if (spec.fault_tolerance.mode == FaultToleranceMode::kCheckpoint) {
    service_->SetReloader([token, scrub_timeout_ms, checkpoint_root](const v1::ClusterMap& map) {
      return ReloadCheckpointOnServers(ServerAddresses(map), token, StampOf(map),
                                       scrub_timeout_ms, checkpoint_root);
    });
    service_->SetServerDeadHandler([svc](int server_id) {
      if (!svc->BeginRollback()) return false;
      svc->ReplaceServer(server_id);
      return true;
    });
  }
  // In modes with parity a dead server is recovered, not fatal: a standby spare takes its id
  // at once, or the slot waits for a replacement process (`ecps run` starts one).
  if (KeepsRedundancy(spec.fault_tolerance.mode)) {
    service_->SetServerDeadHandler([svc](int server_id) {
      svc->ReplaceServer(server_id);
      return true;
    });
  }
  return absl::OkStatus();
}

absl::Status CoordinatorProcess::Start() {
  const JobSpec& spec = options_.spec;
  absl::StatusOr<GrpcServer> server = StartGrpcServer(
      options_.listen_host, options_.port, {glue_->grpc_service()}, ServingThreads(spec));
  if (!server.ok()) return server.status();
  server_ = std::move(server).value();
  auto advertise = AdvertiseHost(options_.listen_host, options_.advertise);
  absl::Status written = advertise.status();
  if (written.ok()) advertised_ = JoinHostPort(*advertise, server_.port);
  if (written.ok() && !options_.port_file.empty()) {
    written = WriteFileDurably(options_.port_file, absl::StrCat(server_.port, "\n"));
  }
  if (written.ok() && !options_.address_file.empty()) {
    written = WriteFileDurably(options_.address_file, absl::StrCat(advertised_, "\n"));
  }
  if (!written.ok()) {
    service_->Shutdown();
    server_.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.server.reset();
    return written;
  }
  // Ready as soon as it listens: registrations, heartbeats and status are all it serves.
  SetHealth(server_.server.get(), kCoordinatorHealthService, true);
  metrics_ = StartRoleMetrics("coordinator", options_.listen_host, spec.monitoring.metrics_port);
  if (metrics_ != nullptr) {
    service_->set_metrics_address(JoinHostPort(*advertise, metrics_->port()));
    CoordinatorService* service = service_.get();
    const std::string token = token_;
    metrics_->AddCallback([service, token](MetricsBuilder* out) {
      v1::StatusRequest request;
      FillHeader(request.mutable_header(), token, 0, "coordinator");
      v1::StatusResponse status;
      if (service->Status(request, &status).ok()) AddJobMetrics(status, out);
    });
  }
  spdlog::info("coordinator for job '{}' listening on {} as {} ({} servers, {} workers, mode {})",
               spec.job.name, server_.address, advertised_, spec.cluster.servers,
               spec.cluster.workers, ToString(spec.fault_tolerance.mode));
  return absl::OkStatus();
}

void CoordinatorProcess::Serve(const std::function<int(absl::Duration)>& wait_for_signal) {
  const absl::Duration tick = TickPeriod(options_);
  // Failure detection and the long cluster operations (checkpoints, a rollback's reload, the
  // final scrub) on threads of their own, so a slow save never delays detecting a death.
  loop_ = std::make_unique<CoordinatorLoop>(service_.get(), tick);
  std::optional<absl::Time> ended_at;
  while (true) {
    if (const int sig = wait_for_signal(tick); sig == kLeadLost) {
      spdlog::error("coordinator: it no longer leads the job; it stops serving");
      return;
    } else if (sig != 0) {
      spdlog::info("coordinator: {} received, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
      return;
    }
    const v1::JobPhase phase = service_->phase();
    if (!ended_at && (phase == v1::JOB_FINISHED || phase == v1::JOB_FAILED)) {
      ended_at = absl::Now();
    }
    if (ended_at && options_.linger_ms >= 0 &&
        absl::Now() - *ended_at >= absl::Milliseconds(options_.linger_ms)) {
      return;
    }
  }
}

absl::Status CoordinatorProcess::WriteFinalStatus() {
  google::protobuf::util::JsonPrintOptions json;
  json.always_print_primitive_fields = true;
  v1::StatusRequest request;
  FillHeader(request.mutable_header(), token_, 0, "coordinator");
  v1::StatusResponse status;
  std::string text;
  absl::Status saved = service_->Status(request, &status);
  if (saved.ok() && !google::protobuf::util::MessageToJsonString(status, &text, json).ok()) {
    saved = absl::InternalError("cannot render the status as JSON");
  }
  if (saved.ok()) saved = WriteFileDurably(options_.final_status_file, text + "\n");
  return saved;
}

void CoordinatorProcess::Shutdown() {
  metrics_.reset();  // no scrape reads the service past here
  // A save in progress finishes first: the servers are never left frozen.
  if (loop_ != nullptr) loop_->Stop();
  // Ending the WatchClusterMap streams first keeps the server's shutdown from waiting on them.
  if (service_ != nullptr) service_->Shutdown();
  if (server_.server != nullptr) {
    server_.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.server->Wait();
    server_.server.reset();
  }
}

int CoordinatorProcess::Stop() {
  Shutdown();
  if (!options_.final_status_file.empty()) {
    if (absl::Status saved = WriteFinalStatus(); !saved.ok()) {
      spdlog::error("coordinator: final status: {}", saved.ToString());
    }
  }
  const v1::JobPhase phase = service_->phase();
  if (phase != v1::JOB_FINISHED && phase != v1::JOB_FAILED) {
    spdlog::warn("coordinator stopped before the job ended");
  }
  return CoordinatorExitCode(phase, service_->data_lost());
}

}  // namespace ecps

#include "coordinator/coordinator_main.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/clock.h"
#include "coordinator/coordinator_loop.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_coordinator.h"
#include "coordinator/process_probe.h"
#include "google/protobuf/util/json_util.h"
#include "proto/ecps.pb.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_job.h"
#include "runtime/net.h"
#include "runtime/rpc.h"
#include "runtime/scrub.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

// Writes `content` to `path` via a temporary file and a rename, so a reader never sees a
// partial file.
absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  FILE* file = std::fopen(tmp.c_str(), "w");
  if (file == nullptr) {
    return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

// Blocks SIGINT/SIGTERM in this thread for its lifetime and lets the owner wait for them.
class TerminationSignals {
 public:
  TerminationSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~TerminationSignals() {
    // Consume whatever is pending so that unblocking does not deliver it.
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  // Waits up to `timeout` for SIGINT/SIGTERM; returns the signal, or 0 on timeout.
  int Wait(absl::Duration timeout) {
    const timespec ts = absl::ToTimespec(timeout);
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    return sig > 0 ? sig : 0;
  }

 private:
  sigset_t set_;
  sigset_t old_;
};

}  // namespace

int RunCoordinator(const CoordinatorOptions& options) {
  const JobSpec& spec = options.spec;
  const std::string token = options.token.empty() ? spec.job.token : options.token;
  if (token.empty()) spdlog::warn("no job token set: every client is accepted");

  TerminationSignals signals;  // before any gRPC thread starts, so they inherit the mask
  RealClock clock;
  CoordinatorServiceOptions service_options;
  service_options.startup_timeout =
      absl::Milliseconds(options.startup_timeout_ms >= 0 ? options.startup_timeout_ms
                                                         : spec.cluster.connect_timeout_s * 1000);
  // A reported server whose port refuses connections died (SIGKILL, a crash): declare it at
  // once. Up to 200 ms per report, and only without the service's lock.
  service_options.process_gone = [](const std::string& address) {
    return ConnectionRefused(address, 200);
  };
  absl::StatusOr<std::unique_ptr<CoordinatorService>> created =
      CoordinatorService::Create(spec, token, &clock, service_options);
  if (!created.ok()) {
    spdlog::error("coordinator: {}", created.status().ToString());
    return 1;
  }
  std::unique_ptr<CoordinatorService> service = std::move(created).value();
  GrpcCoordinator glue(service.get());
  const int scrub_timeout_ms = spec.cluster.rpc_timeout_ms;
  service->SetScrubber([token, scrub_timeout_ms](const v1::ClusterMap& map) {
    std::vector<std::string> addresses;
    for (const auto& s : map.servers()) addresses.push_back(s.address());
    return ScrubServers(addresses, token, map.epoch(), scrub_timeout_ms);
  });

  // Checkpoints (ecps checkpoint, the final save) go to fault_tolerance.checkpoint.dir.
  absl::StatusOr<CheckpointLayout> layout = CheckpointLayoutFor(spec);
  if (!layout.ok()) {
    spdlog::error("coordinator: {}", layout.status().ToString());
    return 1;
  }
  const std::string checkpoint_root = spec.fault_tolerance.checkpoint.dir;
  // A server that dies mid-save is reported at once, as a worker would report it: the
  // workers wait on the frozen servers meanwhile and see nothing fail.
  CoordinatorService* reports_to = service.get();
  auto report_unreachable = [reports_to, token](int server, const std::string& address) {
    v1::ReportFailureRequest report;
    FillHeader(report.mutable_header(), token, 0, "coordinator");
    report.set_role(v1::ROLE_SERVER);
    report.set_id(server);
    report.set_address(address);
    report.set_reason("its checkpoint save failed");
    v1::ReportFailureResponse response;
    reports_to->ReportFailure(report, &response).IgnoreError();
  };
  service->SetCheckpointer(
      [token, scrub_timeout_ms, checkpoint_root, layout = *layout, report_unreachable](
          const v1::ClusterMap& map, const std::function<CheckpointProgress()>& progress) {
        std::vector<std::string> addresses;
        for (const auto& s : map.servers()) addresses.push_back(s.address());
        return SaveCheckpointOnServers(addresses, token, map.epoch(), scrub_timeout_ms,
                                       checkpoint_root, layout, progress, report_unreachable);
      });
  // After each save, only the newest checkpoint.keep checkpoints stay (the one just written
  // always does).
  const int keep = spec.fault_tolerance.checkpoint.keep;
  service->SetPruner([checkpoint_root, keep](const v1::CheckpointReport& saved) {
    return PruneCheckpoints(checkpoint_root, keep, saved.step());
  });

  // Mode checkpoint: a dead server is replaced (a spare, or a new process `ecps run` starts,
  // which loads the last checkpoint), then every server reloads it and every worker rewinds.
  if (spec.fault_tolerance.mode == "checkpoint") {
    service->SetReloader([token, scrub_timeout_ms, checkpoint_root](const v1::ClusterMap& map) {
      std::vector<std::string> addresses;
      for (const auto& s : map.servers()) addresses.push_back(s.address());
      return ReloadCheckpointOnServers(addresses, token, map.epoch(), scrub_timeout_ms,
                                       checkpoint_root);
    });
    CoordinatorService* svc = service.get();
    service->SetServerDeadHandler([svc](int server_id) {
      if (!svc->BeginRollback()) return false;
      svc->ReplaceServer(server_id);
      return true;
    });
  }

  // In modes with parity a dead server is recovered, not fatal: a standby spare takes its id at
  // once, or the slot waits for a replacement process (`ecps run` starts one).
  if (spec.fault_tolerance.mode == "erasure_code" || spec.fault_tolerance.mode == "replication") {
    CoordinatorService* svc = service.get();
    service->SetServerDeadHandler([svc](int server_id) {
      svc->ReplaceServer(server_id);
      return true;
    });
  }

  // One polling thread per expected node keeps every node's RPCs from queueing.
  const int threads =
      std::max(4, spec.cluster.servers + spec.cluster.spares + spec.cluster.workers);
  absl::StatusOr<GrpcServer> server =
      StartGrpcServer(options.listen_host, options.port, {glue.grpc_service()}, threads);
  if (!server.ok()) {
    spdlog::error("coordinator: {}", server.status().ToString());
    return 1;
  }
  auto advertise = AdvertiseHost(options.listen_host, options.advertise);
  absl::Status written = advertise.status();
  if (written.ok() && !options.port_file.empty()) {
    written = WriteFileAtomically(options.port_file, absl::StrCat(server->port, "\n"));
  }
  if (written.ok() && !options.address_file.empty()) {
    written = WriteFileAtomically(options.address_file,
                                  absl::StrCat(JoinHostPort(*advertise, server->port), "\n"));
  }
  if (!written.ok()) {
    spdlog::error("coordinator: {}", written.ToString());
    service->Shutdown();
    server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return 1;
  }
  spdlog::info("coordinator for job '{}' listening on {} as {} ({} servers, {} workers, mode {})",
               spec.job.name, server->address, JoinHostPort(*advertise, server->port),
               spec.cluster.servers, spec.cluster.workers, spec.fault_tolerance.mode);

  absl::Duration tick = absl::Milliseconds(options.tick_ms);
  if (options.tick_ms <= 0) {
    tick = std::clamp(absl::Milliseconds(spec.cluster.heartbeat_timeout_ms) / 10,
                      absl::Milliseconds(1), absl::Milliseconds(100));
  }
  // Failure detection and the long cluster operations (checkpoints, a rollback's reload, the
  // final scrub) on threads of their own, so a slow save never delays detecting a death.
  CoordinatorLoop loop(service.get(), tick);
  std::optional<absl::Time> ended_at;
  while (true) {
    if (const int sig = signals.Wait(tick); sig != 0) {
      spdlog::info("coordinator: {} received, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
    const v1::JobPhase phase = service->phase();
    if (!ended_at && (phase == v1::JOB_FINISHED || phase == v1::JOB_FAILED)) {
      ended_at = absl::Now();
    }
    if (ended_at && absl::Now() - *ended_at >= absl::Milliseconds(options.linger_ms)) break;
  }

  loop.Stop();          // lets a save in progress finish: never leaves the servers frozen
  service->Shutdown();  // ends WatchClusterMap streams, so the server shutdown does not wait
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->server->Wait();
  if (!options.final_status_file.empty()) {
    google::protobuf::util::JsonPrintOptions json;
    json.always_print_primitive_fields = true;
    v1::StatusRequest request;
    FillHeader(request.mutable_header(), token, 0, "coordinator");
    v1::StatusResponse status;
    std::string text;
    absl::Status saved = service->Status(request, &status);
    if (saved.ok() &&
        !google::protobuf::util::MessageToJsonString(status, &text, json).ok()) {
      saved = absl::InternalError("cannot render the status as JSON");
    }
    if (saved.ok()) saved = WriteFileAtomically(options.final_status_file, text + "\n");
    if (!saved.ok()) spdlog::error("coordinator: final status: {}", saved.ToString());
  }
  const v1::JobPhase phase = service->phase();
  if (phase == v1::JOB_FINISHED) return 0;
  if (phase == v1::JOB_FAILED && service->data_lost()) return kExitDataLost;
  if (phase != v1::JOB_FAILED) spdlog::warn("coordinator stopped before the job ended");
  return 1;
}

}  // namespace ecps

#include "ps/server_main.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "proto/ecps.grpc.pb.h"
#include "ps/grpc_parameter_server.h"
#include "ps/parameter_server.h"
#include "ps/server_lifecycle.h"
#include "ps/server_metrics.h"
#include "ps/server_parts.h"
#include "runtime/coordinator_client.h"
#include "runtime/health.h"
#include "runtime/metrics.h"
#include "runtime/net.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

const char* Describe(v1::NodeState state) {
  switch (state) {
    case v1::NODE_STANDBY:
      return "a standby spare";
    case v1::NODE_RECOVERING:
      return "a replacement";
    default:
      return "starting";
  }
}

// Leaves at once: nothing a fenced server holds may be kept or sent any more, so it does
// not wait for requests and streams that can only be refused.
[[noreturn]] void ExitFenced() {
  spdlog::default_logger()->flush();
  std::_Exit(1);
}

// The role's metrics endpoint (null when the spec asks for none), advertised to the
// coordinator, serving `core`'s statistics under `life`'s id. Both must outlive it.
std::unique_ptr<MetricsEndpoint> StartServerMetrics(
    const ServerOptions& options, const std::string& name, const std::string& advertise,
    CoordinatorClient* coordinator, ServerLifecycle* life, ParameterServerCore* core) {
  std::unique_ptr<MetricsEndpoint> metrics =
      StartRoleMetrics(name, options.listen_host, options.spec.monitoring.metrics_port);
  if (metrics != nullptr) {
    coordinator->set_metrics_address(JoinHostPort(advertise, metrics->port()));
    metrics->AddCallback([life, core](MetricsBuilder* out) {
      v1::ServerStats stats;
      core->FillStats(&stats);
      AddServerMetrics(life->id(), stats, out);
    });
  }
  return metrics;
}

// The heartbeat thread: reports readiness on `server`'s health service and acts on what
// the coordinator answers, until the server stops.
void SendHeartbeats(ServerLifecycle* life, grpc::Server* server) {
  while (life->running()) {
    SetHealth(server, kParameterServerHealthService, ServerReady(life->state()));
    switch (life->Heartbeat()) {
      case HeartbeatAction::kKill:
        spdlog::warn("server {}: killed by the coordinator (ecps kill)", life->id());
        std::raise(SIGKILL);
        break;
      case HeartbeatAction::kFenced:
        spdlog::warn("server {}: fenced by the coordinator (epoch {}); exiting", life->id(),
                     life->fenced_epoch());
        ExitFenced();
      case HeartbeatAction::kCoordinatorLost:
        spdlog::error("{}", life->lost_message());
        break;
      case HeartbeatAction::kContinue:
        break;
    }
    std::this_thread::sleep_for(life->NextHeartbeatWait());
  }
}

// Serves until the server stops: a spare first waits for a slot, then the server starts and
// follows the map. Leaves the process at once when the server was fenced.
void ServeUntilStopped(ServerLifecycle* life, const ParameterServerCore& core) {
  // A spare waits until the coordinator gives it a dead server's id.
  if (life->state() == v1::NODE_STANDBY) life->WaitForSlot();
  if (life->running()) {
    if (absl::Status started = life->Start(); !started.ok()) {
      spdlog::error("server {}: {}", life->id(), started.ToString());
    }
  }
  // Follow the map: a newer epoch fences old requests; a replaced peer gets a new address.
  while (life->running() && life->FollowMap()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (core.fenced()) {
    spdlog::warn("server {}: fenced (declared dead); exiting", life->id());
    ExitFenced();
  }
}

void LogStopped(const ServerLifecycle& life, const ParameterServerCore& core) {
  v1::ServerStats stats;
  core.FillStats(&stats);
  if (stats.delta_batches_sent() > 0) {
    spdlog::info("server {}: stopped; {} parity batches sent, {} of them over TCP", life.id(),
                 stats.delta_batches_sent(), stats.delta_batches_sent_tcp());
  } else {
    spdlog::info("server {}: stopped", life.id());
  }
}

}  // namespace

int RunServer(const ServerOptions& options) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const JobSpec& spec = options.spec;
  ParameterServerCore core(options.token);
  GrpcParameterServer service(&core);
  auto server = StartGrpcServer(options.listen_host, options.port, {&service},
                                spec.cluster.server_threads);
  if (!server.ok()) {
    spdlog::error("cannot start the server: {}", server.status().ToString());
    return 1;
  }
  // Parity batches over plain TCP (fault_tolerance.parity_transport: tcp; the spec refuses
  // it with TLS). Declared after `core`, whose handler it calls: destroyed first.
  auto tcp_deltas = ServeParityOverTcp(spec, &core, options.listen_host);
  if (!tcp_deltas.ok()) {
    spdlog::error("cannot start the server: {}", tcp_deltas.status().ToString());
    return 1;
  }
  if (*tcp_deltas != nullptr) {
    spdlog::info("parity batches over TCP on port {}", (*tcp_deltas)->port());
  }
  // Peers and workers dial what the map says: never a wildcard, loopback only when asked.
  auto advertise = AdvertiseHost(options.listen_host, options.advertise);
  if (!advertise.ok()) {
    spdlog::error("cannot start the server: {}", advertise.status().ToString());
    return 1;
  }
  const std::string address = JoinHostPort(*advertise, server->port);
  // Ready for workers once ACTIVE or RECOVERING (runtime/health.h); not while starting.
  SetHealth(server->server.get(), kParameterServerHealthService, false);
  const std::string name = "server-" + std::to_string(options.requested_id);
  // It checks callers with the job secret (options.token) and presents its role token.
  CoordinatorClient coordinator(options.coordinator, core.token(), name,
                                spec.cluster.rpc_timeout_ms, options.coordinator_file);
  ServerLifecycle life(options, MakeInstanceId(), address, &coordinator, &core, &g_stop);
  // Declared after `life` and `core`, which its callback reads: destroyed first.
  std::unique_ptr<MetricsEndpoint> metrics =
      StartServerMetrics(options, name, *advertise, &coordinator, &life, &core);
  auto registered = life.Register();
  if (!registered.ok()) {
    spdlog::error("{}", registered.status().ToString());
    return 1;
  }
  spdlog::info("server {} listening on {} as {} (epoch {}, {})", life.id(), server->address,
               address, registered->map().epoch(), Describe(life.state()));
  coordinator.StartWatch();

  // Heartbeats run from the start, so the coordinator sees a server that is initialising.
  std::thread heartbeats([&] { SendHeartbeats(&life, server->server.get()); });
  ServeUntilStopped(&life, core);
  life.SetExitCodeIfUnset(0);
  heartbeats.join();
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  LogStopped(life, core);
  return life.exit_code();
}

}  // namespace ecps

#include "worker/worker_main.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "runtime/coordinator_client.h"
#include "runtime/health.h"
#include "runtime/metrics.h"
#include "runtime/net.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"
#include "worker/worker_lifecycle.h"
#include "worker/worker_metrics.h"

namespace ecps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

}  // namespace

int RunWorker(const WorkerOptions& options) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const JobSpec& spec = options.spec;
  const std::string name = "worker-" + std::to_string(options.id);
  // A worker serves no RPC of ecps, only grpc.health.v1 (Kubernetes' probes) and /metrics.
  auto health = StartGrpcServer(options.listen_host, options.port, {}, 1);
  if (!health.ok()) {
    spdlog::error("{}: cannot serve health checks: {}", name, health.status().ToString());
    return 1;
  }
  spdlog::info("{}: health service on {}", name, health->address);
  CoordinatorClient coordinator(options.coordinator, options.token, name,
                                spec.cluster.rpc_timeout_ms, options.coordinator_file);
  WorkerLifecycle life(options, MakeInstanceId(), &coordinator, &g_stop);
  // Declared after `life`, which its callback reads: destroyed first.
  std::unique_ptr<MetricsEndpoint> metrics =
      StartRoleMetrics(name, options.listen_host, spec.monitoring.metrics_port);
  if (metrics != nullptr) {
    auto advertise = AdvertiseHost(options.listen_host, "");
    if (advertise.ok()) coordinator.set_metrics_address(JoinHostPort(*advertise, metrics->port()));
    metrics->AddCallback([&life, id = options.id](MetricsBuilder* out) {
      AddWorkerMetrics(id, life.board()->Peek(), out);
    });
  }
  auto registered = life.Register();
  if (!registered.ok()) {
    spdlog::error("{}: {}", life.sender(), registered.status().ToString());
    return 1;
  }
  coordinator.StartWatch();
  if (absl::Status planned = life.PlanStart(*registered); !planned.ok()) {
    spdlog::error("{}: {}", life.sender(), planned.ToString());
    return 1;
  }
  std::thread heartbeats([&] {
    while (life.heartbeating()) {
      switch (life.Heartbeat()) {
        case WorkerHeartbeatAction::kKill:
          spdlog::warn("{}: killed by the coordinator (ecps kill)", life.sender());
          std::raise(SIGKILL);
          break;
        case WorkerHeartbeatAction::kCoordinatorLost:
          spdlog::error("{}", life.lost_message());
          break;
        case WorkerHeartbeatAction::kContinue:
          break;
      }
      std::this_thread::sleep_for(life.NextHeartbeatWait());
    }
  });
  const absl::Status trained = life.Train();
  life.Finish(trained);
  heartbeats.join();
  health->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  return trained.ok() ? life.exit_code() : 1;
}

}  // namespace ecps

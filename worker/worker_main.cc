#include "worker/worker_main.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "kernels/dense_ops.h"
#include "runtime/coordinator_client.h"
#include "spdlog/spdlog.h"
#include "worker/worker_lifecycle.h"

namespace ecps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

}  // namespace

int RunWorker(const WorkerOptions& options) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const JobSpec& spec = options.spec;
  SetBlasThreads(spec.cluster.worker_threads);
  CoordinatorClient coordinator(options.coordinator, options.token,
                                "worker-" + std::to_string(options.id),
                                spec.cluster.rpc_timeout_ms);
  WorkerLifecycle life(options, MakeInstanceId(), &coordinator, &g_stop);
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
      if (life.Heartbeat() == WorkerHeartbeatAction::kKill) {
        spdlog::warn("{}: killed by the coordinator (ecps kill)", life.sender());
        std::raise(SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(spec.cluster.heartbeat_interval_ms));
    }
  });
  const absl::Status trained = life.Train();
  life.Finish(trained);
  heartbeats.join();
  return trained.ok() ? life.exit_code() : 1;
}

}  // namespace ecps

#include "ps/server_main.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "proto/ecps.grpc.pb.h"
#include "ps/grpc_parameter_server.h"
#include "ps/parameter_server.h"
#include "ps/server_parts.h"
#include "runtime/coordinator_client.h"
#include "runtime/placement.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

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
  const std::string instance = MakeInstanceId();
  std::string sender = "server-" + std::to_string(options.requested_id);
  CoordinatorClient coordinator(options.coordinator, options.token, sender,
                                spec.cluster.rpc_timeout_ms);
  auto registered =
      coordinator.Register(v1::ROLE_SERVER, server->address, options.requested_id, instance);
  if (!registered.ok()) {
    spdlog::error("cannot register with the coordinator at {}: {}", options.coordinator,
                  registered.status().ToString());
    return 1;
  }
  const int id = registered->id();
  spdlog::info("server {} listening on {} (epoch {})", id, server->address,
               registered->map().epoch());
  coordinator.StartWatch();

  std::atomic<v1::NodeState> state{registered->state() == v1::NODE_STANDBY ? v1::NODE_STANDBY
                                                                           : v1::NODE_STARTING};
  std::atomic<int> exit_code{-1};

  // Heartbeats run from the start, so the coordinator sees a server that is initialising.
  std::thread heartbeats([&] {
    while (!g_stop.load() && exit_code.load() < 0) {
      v1::HeartbeatRequest hb;
      FillHeader(hb.mutable_header(), options.token, coordinator.epoch(), sender);
      hb.set_role(v1::ROLE_SERVER);
      hb.set_id(id);
      hb.set_instance(instance);
      hb.set_state(state.load());
      core.FillStats(hb.mutable_server());
      auto resp = coordinator.Heartbeat(hb);
      if (resp.ok()) {
        if (resp->epoch() > core.epoch()) core.SetEpoch(resp->epoch());
        if (resp->fenced()) {
          spdlog::warn("server {}: fenced by the coordinator (epoch {}); exiting", id,
                       resp->epoch());
          exit_code.store(1);
        } else if (resp->phase() == v1::JOB_FINISHED) {
          exit_code.store(0);
        } else if (resp->phase() == v1::JOB_FAILED) {
          exit_code.store(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(spec.cluster.heartbeat_interval_ms));
    }
  });

  if (state.load() != v1::NODE_STANDBY) {
    // Peers' addresses are needed for parity streams and dense replicas: wait until every
    // server has registered.
    auto map = coordinator.WaitForMap(
        [&](const v1::ClusterMap& m) {
          if (m.servers_size() != spec.cluster.servers) return false;
          for (const auto& s : m.servers()) {
            if (s.address().empty()) return false;
          }
          return true;
        },
        120000);
    if (!map.ok()) {
      spdlog::error("server {}: {}", id, map.status().ToString());
      exit_code.store(1);
    } else {
      std::vector<std::string> addresses;
      for (const auto& s : map->servers()) addresses.push_back(s.address());
      auto t0 = std::chrono::steady_clock::now();
      auto parts = BuildServerParts(spec, id, addresses, &core);
      if (!parts.ok()) {
        spdlog::error("server {}: {}", id, parts.status().ToString());
        exit_code.store(1);
      } else {
        int64_t rows = parts->embeddings->data_rows();
        int64_t parity = parts->parity != nullptr ? parts->parity->parity_rows() : 0;
        std::string code = parts->code != nullptr ? parts->code->backend() : "none";
        core.Install(std::move(*parts));
        state.store(v1::NODE_ACTIVE);
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        spdlog::info("server {}: {} data rows and {} parity rows ({}) initialised in {:.2f} s; "
                     "serving", id, rows, parity, code, secs);
      }
    }
  }

  while (!g_stop.load() && exit_code.load() < 0) {
    // The watcher keeps the epoch fresh between heartbeats.
    uint64_t e = coordinator.epoch();
    if (e > core.epoch()) core.SetEpoch(e);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (exit_code.load() < 0) exit_code.store(0);
  heartbeats.join();
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  spdlog::info("server {}: stopped", id);
  return exit_code.load();
}

}  // namespace ecps

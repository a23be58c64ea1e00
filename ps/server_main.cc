#include "ps/server_main.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <set>
#include <thread>

#include "proto/ecps.grpc.pb.h"
#include "ps/grpc_parameter_server.h"
#include "ps/parameter_server.h"
#include "ps/server_parts.h"
#include "runtime/coordinator_client.h"
#include "runtime/net.h"
#include "runtime/rpc.h"
#include "spdlog/spdlog.h"

namespace ecps {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

// The logical id `instance` holds in `map`, or -1.
int IdOf(const v1::ClusterMap& map, const std::string& instance) {
  for (int s = 0; s < map.servers_size(); ++s) {
    if (map.servers(s).instance() == instance) return s;
  }
  return -1;
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
  // Peers and workers dial what the map says: never a wildcard, loopback only when asked.
  auto advertise = AdvertiseHost(options.listen_host, options.advertise);
  if (!advertise.ok()) {
    spdlog::error("cannot start the server: {}", advertise.status().ToString());
    return 1;
  }
  const std::string address = JoinHostPort(*advertise, server->port);
  const std::string instance = MakeInstanceId();
  CoordinatorClient coordinator(options.coordinator, options.token,
                                "server-" + std::to_string(options.requested_id),
                                spec.cluster.rpc_timeout_ms);
  auto registered = coordinator.Register(v1::ROLE_SERVER, address, options.requested_id,
                                         instance, spec.cluster.connect_timeout_s * 1000);
  if (!registered.ok()) {
    spdlog::error("cannot register with the coordinator at {}: {}", options.coordinator,
                  registered.status().ToString());
    return 1;
  }
  std::atomic<int> id{registered->id()};
  spdlog::info("server {} listening on {} as {} (epoch {}, {})", id.load(), server->address,
               address,
               registered->map().epoch(),
               registered->state() == v1::NODE_STANDBY      ? "a standby spare"
               : registered->state() == v1::NODE_RECOVERING ? "a replacement"
                                                            : "starting");
  coordinator.StartWatch();

  std::atomic<v1::NodeState> state{registered->state() == v1::NODE_STANDBY   ? v1::NODE_STANDBY
                                   : registered->state() == v1::NODE_RECOVERING ? v1::NODE_RECOVERING
                                                                            : v1::NODE_STARTING};
  std::atomic<int> exit_code{-1};

  // Heartbeats run from the start, so the coordinator sees a server that is initialising.
  std::thread heartbeats([&] {
    while (!g_stop.load() && exit_code.load() < 0) {
      v1::HeartbeatRequest hb;
      FillHeader(hb.mutable_header(), options.token, coordinator.epoch(),
                 "server-" + std::to_string(id.load()));
      hb.set_role(v1::ROLE_SERVER);
      hb.set_id(id.load());
      hb.set_instance(instance);
      v1::NodeState now = state.load();
      if (now == v1::NODE_RECOVERING && core.ready() && core.rebuilt()) {
        state.store(v1::NODE_ACTIVE);
        now = v1::NODE_ACTIVE;
        spdlog::info("server {}: rebuilt; active", id.load());
      }
      hb.set_state(now);
      core.FillStats(hb.mutable_server());
      auto resp = coordinator.Heartbeat(hb);
      if (resp.ok()) {
        if (resp->fenced()) {
          // Declared dead (a pause past the timeout, a partition): refuse everything at once
          // and never adopt the new epoch, so nothing this process still sends is accepted.
          core.Fence();
        } else if (resp->epoch() > core.epoch()) {
          core.SetEpoch(resp->epoch());
        }
        if (resp->kill()) {  // ecps kill: die at once, as a crash would
          spdlog::warn("server {}: killed by the coordinator (ecps kill)", id.load());
          std::raise(SIGKILL);
        }
        if (resp->fenced()) {
          spdlog::warn("server {}: fenced by the coordinator (epoch {}); exiting", id.load(),
                       resp->epoch());
          spdlog::default_logger()->flush();
          std::_Exit(1);
        } else if (resp->phase() == v1::JOB_FINISHED) {
          exit_code.store(0);
        } else if (resp->phase() == v1::JOB_FAILED) {
          exit_code.store(1);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(spec.cluster.heartbeat_interval_ms));
    }
  });

  // A spare waits until the coordinator gives it a dead server's id.
  if (state.load() == v1::NODE_STANDBY) {
    while (!g_stop.load() && exit_code.load() < 0) {
      auto map = coordinator.WaitForMap(
          [&](const v1::ClusterMap& m) { return IdOf(m, instance) >= 0; }, 200);
      if (map.ok()) {
        id.store(IdOf(*map, instance));
        state.store(v1::NODE_RECOVERING);
        spdlog::info("server {}: promoted from spare (epoch {}); rebuilding", id.load(),
                     map->epoch());
        break;
      }
    }
  }

  if (!g_stop.load() && exit_code.load() < 0) {
    const bool recovering = state.load() == v1::NODE_RECOVERING;
    // Peers' addresses are needed for parity streams and dense replicas: wait until every
    // server slot has one, as long as the coordinator waits for them (roles start in any
    // order).
    auto map = coordinator.WaitForMap(
        [&](const v1::ClusterMap& m) {
          if (m.servers_size() != spec.cluster.servers) return false;
          for (const auto& s : m.servers()) {
            if (s.address().empty()) return false;
          }
          return true;
        },
        spec.cluster.connect_timeout_s * 1000);
    if (!map.ok()) {
      spdlog::error("server {}: {}", id.load(), map.status().ToString());
      exit_code.store(1);
    } else {
      std::vector<std::string> addresses;
      for (const auto& s : map->servers()) addresses.push_back(s.address());
      const int self = id.load();
      RecoveryHooks hooks;
      hooks.unusable = [&coordinator, self] {
        std::set<int> out;
        v1::ClusterMap m = coordinator.map();
        for (int s = 0; s < m.servers_size(); ++s) {
          // A suspect is probably alive: read from it, and treat what fails as missing.
          v1::NodeState st = m.servers(s).state();
          if (s != self && st != v1::NODE_ACTIVE && st != v1::NODE_SUSPECT) out.insert(s);
        }
        return out;
      };
      hooks.live_peers = [&coordinator, self] {
        std::vector<int> out;
        v1::ClusterMap m = coordinator.map();
        for (int s = 0; s < m.servers_size(); ++s) {
          v1::NodeState st = m.servers(s).state();
          if (s != self && (st == v1::NODE_ACTIVE || st == v1::NODE_RECOVERING ||
                            st == v1::NODE_SUSPECT)) {
            out.push_back(s);
          }
        }
        return out;
      };
      hooks.training_done = [&coordinator] {
        v1::ClusterMap m = coordinator.map();
        if (m.workers_size() == 0) return false;
        for (const v1::NodeInfo& w : m.workers()) {
          if (w.state() != v1::NODE_FINISHED) return false;
        }
        return true;
      };
      if (map->epoch() > core.epoch()) core.SetEpoch(map->epoch());
      auto t0 = std::chrono::steady_clock::now();
      // Mode checkpoint has nothing to rebuild from: a replacement loads the last checkpoint
      // (the coordinator then has every server reload it and every worker rewind).
      const bool from_checkpoint = recovering && spec.fault_tolerance.mode == "checkpoint";
      JobSpec build_spec = spec;
      if (from_checkpoint) build_spec.job.resume_from = spec.fault_tolerance.checkpoint.dir;
      auto parts = BuildServerParts(build_spec, self, addresses, &core, instance, nullptr,
                                    recovering && !from_checkpoint ? &hooks : nullptr,
                                    [&coordinator](int peer, const std::string& address) {
                                      coordinator.ReportServerUnreachable(
                                          peer, "RPCs from a peer server fail", address);
                                    });
      if (!parts.ok()) {
        spdlog::error("server {}: {}", self, parts.status().ToString());
        // A server that cannot hold its tables will not on a restart either: say so with an
        // exit code of its own, so that the launcher does not start it again.
        exit_code.store(absl::IsResourceExhausted(parts.status()) ? kExitCannotAllocate : 1);
      } else {
        int64_t rows = parts->embeddings->data_rows();
        int64_t parity = parts->parity != nullptr ? parts->parity->parity_rows() : 0;
        std::string code = parts->code != nullptr ? parts->code->backend() : "none";
        core.Install(std::move(*parts));
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (recovering) {
          core.StartRebuild();
          spdlog::info("server {}: replacement serving; rebuilding {} data rows and {} parity "
                       "rows ({}) from the survivors", self, rows, parity, code);
        } else {
          state.store(v1::NODE_ACTIVE);
          spdlog::info("server {}: {} data rows and {} parity rows ({}) initialised in {:.2f} s; "
                       "serving", self, rows, parity, code, secs);
        }
      }
    }
  }

  // Follow the map: a newer epoch fences old requests; a replaced peer gets a new address.
  std::vector<std::string> known;
  while (!g_stop.load() && exit_code.load() < 0) {
    v1::ClusterMap map = coordinator.map();
    const int me = id.load();
    if (me >= 0 && me < map.servers_size() && !map.servers(me).instance().empty() &&
        map.servers(me).instance() != instance) {
      // The map gives this id to another instance: this process was replaced.
      core.Fence();
      break;
    }
    if (me >= 0 && me < map.servers_size() && map.servers(me).instance() == instance &&
        map.servers(me).state() == v1::NODE_DEAD) {
      // Declared dead, not replaced yet: out for good all the same. Without this, the map
      // stream (which may get through before the next heartbeat does) would hand this
      // process the new epoch, and requests it sends would carry a current one.
      core.Fence();
      break;
    }
    if (map.epoch() > core.epoch()) core.SetEpoch(map.epoch());
    if (core.ready()) core.FollowMap(map);
    known.resize(map.servers_size());
    for (int s = 0; s < map.servers_size(); ++s) {
      const std::string& address = map.servers(s).address();
      if (address.empty() || address == known[s]) continue;
      if (!known[s].empty()) core.UpdatePeerAddress(s, address);
      known[s] = address;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (core.fenced()) {
    // Nothing here may be kept or sent any more: leave at once rather than wait for
    // requests and streams that can only be refused.
    spdlog::warn("server {}: fenced (declared dead); exiting", id.load());
    spdlog::default_logger()->flush();
    std::_Exit(1);
  }
  if (exit_code.load() < 0) exit_code.store(0);
  heartbeats.join();
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  spdlog::info("server {}: stopped", id.load());
  return exit_code.load();
}

}  // namespace ecps

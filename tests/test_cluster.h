// In-process parameter servers on real loopback gRPC ports, for tests that drive the worker's
// training loop or send requests without a coordinator.
#ifndef ECPS_TESTS_TEST_CLUSTER_H_
#define ECPS_TESTS_TEST_CLUSTER_H_

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "proto/ecps.pb.h"
#include "ps/grpc_parameter_server.h"
#include "ps/parameter_server.h"
#include "ps/server_parts.h"
#include "domain/placement.h"
#include "runtime/rpc.h"
#include "runtime/spec.h"

namespace ecps {

class TestCluster {
 public:
  // Starts spec.cluster.servers servers holding rows with code (k=1, r=0), initialised
  // exactly as `ecps server` initialises them.
  // Starts spec.cluster.servers servers, built exactly as `ecps server` builds them (the
  // spec's fault-tolerance mode included). `transport`, when set, carries every server's
  // parity deltas (a fault-injecting seam).
  static std::unique_ptr<TestCluster> Start(const JobSpec& spec, const std::string& token,
                                            DeltaTransport* transport = nullptr) {
    auto cluster = std::unique_ptr<TestCluster>(new TestCluster);
    const int servers = spec.cluster.servers;
    int k = 1, r = 0;
    RowCodeShape(spec.fault_tolerance, &k, &r);
    cluster->map_.set_epoch(1);
    cluster->map_.set_k(k);
    cluster->map_.set_r(r);
    cluster->map_.set_mode(ToString(spec.fault_tolerance.mode));
    cluster->map_.set_phase(v1::JOB_RUNNING);
    // Listen first, so every server knows every address before it builds its parts.
    std::vector<std::string> addresses;
    for (int s = 0; s < servers; ++s) {
      auto core = std::make_unique<ParameterServerCore>(token);
      core->SetEpoch(1);
      auto service = std::make_unique<GrpcParameterServer>(core.get());
      auto server = StartGrpcServer("127.0.0.1", 0, {service.get()}, 4);
      if (!server.ok()) return nullptr;
      addresses.push_back(server->address);
      v1::NodeInfo* info = cluster->map_.add_servers();
      info->set_id(s);
      info->set_address(server->address);
      info->set_state(v1::NODE_ACTIVE);
      cluster->cores_.push_back(std::move(core));
      cluster->services_.push_back(std::move(service));
      cluster->servers_.push_back(std::move(*server));
    }
    for (int s = 0; s < servers; ++s) {
      auto parts = BuildServerParts(spec, s, addresses, cluster->cores_[s].get(),
                                    "test-server-" + std::to_string(s), transport);
      if (!parts.ok()) return nullptr;
      cluster->cores_[s]->Install(std::move(*parts));
      auto tcp = ServeParityOverTcp(spec, cluster->cores_[s].get(), "127.0.0.1");
      if (!tcp.ok()) return nullptr;
      cluster->tcp_.push_back(std::move(*tcp));
    }
    return cluster;
  }

  ~TestCluster() {
    tcp_.clear();  // their handlers use the cores
    for (auto& s : servers_) s.server->Shutdown();
    cores_.clear();  // stops delta streams before the gRPC servers go
    retired_.clear();
  }

  // Simulates the death of the servers `victims` (at once) and their replacement: the old
  // servers stop answering, new ones take their ids at new addresses in a new epoch, every
  // other server learns the addresses and epoch, and each replacement starts rebuilding,
  // treating every server that is still rebuilding as unusable. Returns the new cores.
  std::vector<ParameterServerCore*> ReplaceMany(const JobSpec& spec, const std::string& token,
                                                const std::vector<int>& victims) {
    for (int s : victims) Stop(s);
    std::vector<std::unique_ptr<ParameterServerCore>> cores;
    std::vector<std::unique_ptr<GrpcParameterServer>> services;
    std::vector<GrpcServer> servers;
    uint64_t epoch;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      epoch = map_.epoch() + 1;
      map_.set_epoch(epoch);
    }
    for (int s : victims) {
      auto core = std::make_unique<ParameterServerCore>(token);
      core->SetEpoch(epoch);
      auto service = std::make_unique<GrpcParameterServer>(core.get());
      auto server = StartGrpcServer("127.0.0.1", 0, {service.get()}, 4);
      if (!server.ok()) return {};
      std::lock_guard<std::mutex> lock(map_mu_);
      map_.mutable_servers(s)->set_address(server->address);
      cores.push_back(std::move(core));
      services.push_back(std::move(service));
      servers.push_back(std::move(*server));
    }
    std::vector<std::string> addresses;
    const v1::ClusterMap map = current_map();
    for (const auto& n : map.servers()) addresses.push_back(n.address());
    std::vector<ParameterServerCore*> out;
    {
      std::lock_guard<std::mutex> lock(map_mu_);
      for (size_t i = 0; i < victims.size(); ++i) {
        const int s = victims[i];
        retired_.push_back(std::move(cores_[s]));
        retired_services_.push_back(std::move(services_[s]));
        retired_servers_.push_back(std::move(servers_[s]));
        cores_[s] = std::move(cores[i]);
        services_[s] = std::move(services[i]);
        servers_[s] = std::move(servers[i]);
      }
      for (size_t o = 0; o < cores_.size(); ++o) {
        cores_[o]->SetEpoch(epoch);
        for (int s : victims) {
          if (static_cast<int>(o) != s) cores_[o]->UpdatePeerAddress(s, addresses[s]);
        }
      }
    }
    for (int s : victims) {
      RecoveryHooks hooks;
      hooks.unusable = [this, s] {
        std::set<int> out;
        std::lock_guard<std::mutex> lock(map_mu_);
        for (size_t o = 0; o < cores_.size(); ++o) {
          if (static_cast<int>(o) != s && !cores_[o]->rebuilt()) out.insert(static_cast<int>(o));
        }
        return out;
      };
      hooks.training_done = training_done;
      const int n = spec.cluster.servers;
      hooks.live_peers = [n, s] {
        std::vector<int> out;
        for (int o = 0; o < n; ++o) {
          if (o != s) out.push_back(o);
        }
        return out;
      };
      ParameterServerCore* core = cores_[s].get();
      auto parts = BuildServerParts(spec, s, addresses, core,
                                    "test-replacement-" + std::to_string(s) + "-" +
                                        std::to_string(epoch),
                                    nullptr, &hooks);
      if (!parts.ok()) return {};
      core->Install(std::move(*parts));
      auto tcp = ServeParityOverTcp(spec, core, "127.0.0.1");
      if (!tcp.ok()) return {};
      tcp_[s] = std::move(*tcp);
      out.push_back(core);
    }
    for (ParameterServerCore* core : out) core->StartRebuild();
    return out;
  }

  ParameterServerCore* Replace(const JobSpec& spec, const std::string& token, int s) {
    auto cores = ReplaceMany(spec, token, {s});
    return cores.empty() ? nullptr : cores[0];
  }

  // What replacements made from now on are told of the workers (RecoveryHooks): unset, the
  // rebuild keeps to its rate limit throughout.
  std::function<bool()> training_done;

  // The current map (a copy: Replace changes it).
  v1::ClusterMap current_map() const {
    std::lock_guard<std::mutex> lock(map_mu_);
    return map_;
  }

  const v1::ClusterMap& map() const { return map_; }
  // Server `s` stops answering: its ports close, as a killed process's would.
  void Stop(int s) {
    servers_[s].server->Shutdown();
    tcp_[s].reset();
  }
  // Only server `s`'s parity port closes (a firewall, a listener gone): its gRPC still answers.
  void StopTcp(int s) { tcp_[s].reset(); }
  // The port server `s` takes parity batches on over TCP (0: none).
  int tcp_port(int s) const { return tcp_[s] != nullptr ? tcp_[s]->port() : 0; }

  ParameterServerCore* core(int s) {
    std::lock_guard<std::mutex> lock(map_mu_);
    return cores_[s].get();
  }
  const std::string& address(int s) const { return servers_[s].address; }

 private:
  TestCluster() = default;
  mutable std::mutex map_mu_;
  v1::ClusterMap map_;
  std::vector<std::unique_ptr<ParameterServerCore>> retired_;
  std::vector<std::unique_ptr<GrpcParameterServer>> retired_services_;
  std::vector<GrpcServer> retired_servers_;
  std::vector<std::unique_ptr<ParameterServerCore>> cores_;
  std::vector<std::unique_ptr<GrpcParameterServer>> services_;
  std::vector<GrpcServer> servers_;
  // Parity over TCP, by server (null entries without it); declared after the cores whose
  // handlers they call, and cleared first.
  std::vector<std::unique_ptr<TcpDeltaListener>> tcp_;
};

// A small synthetic job for tests.
inline JobSpec SmallSpec(int servers, int64_t steps) {
  JobSpec spec;
  spec.job.steps = steps;
  spec.job.eval_every = 0;
  spec.job.eval_samples = 2048;
  spec.job.seed = 11;
  spec.cluster.servers = servers;
  spec.cluster.workers = 1;
  spec.model.embedding_dim = 8;
  spec.model.bottom_mlp = {32, 8};
  spec.model.top_mlp = {32, 16};
  spec.model.table_rows.assign(spec.model.num_sparse, 300);
  spec.data.batch_size = 128;
  return spec;
}

}  // namespace ecps

#endif  // ECPS_TESTS_TEST_CLUSTER_H_

// In-process parameter servers on real loopback gRPC ports, for tests that drive the worker's
// training loop or send requests without a coordinator.
#ifndef ECPS_TESTS_TEST_CLUSTER_H_
#define ECPS_TESTS_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "kernels/dlrm.h"
#include "proto/ecps.pb.h"
#include "ps/grpc_parameter_server.h"
#include "ps/parameter_server.h"
#include "runtime/placement.h"
#include "runtime/rpc.h"
#include "runtime/spec.h"

namespace ecps {

class TestCluster {
 public:
  // Starts spec.cluster.servers servers holding rows with code (k=1, r=0), initialised
  // exactly as `ecps server` initialises them.
  static std::unique_ptr<TestCluster> Start(const JobSpec& spec, const std::string& token) {
    auto cluster = std::unique_ptr<TestCluster>(new TestCluster);
    const int servers = spec.cluster.servers;
    auto placement = Placement::Create(servers, 1, 0, spec.model.table_rows);
    auto model = Dlrm::Create(spec.model, 1);
    if (!placement.ok() || !model.ok()) return nullptr;
    cluster->map_.set_epoch(1);
    cluster->map_.set_k(1);
    cluster->map_.set_r(0);
    cluster->map_.set_phase(v1::JOB_RUNNING);
    for (int s = 0; s < servers; ++s) {
      auto core = std::make_unique<ParameterServerCore>(token);
      auto store = EmbeddingStore::Create(*placement, s, spec.model.embedding_dim,
                                          spec.optimizer.sparse, spec.job.seed);
      if (!store.ok()) return nullptr;
      std::vector<std::vector<float>> dense;
      (*model)->InitDense(spec.job.seed, &dense);
      core->Install(std::move(*store), std::make_unique<DenseStore>(spec.optimizer.dense, servers,
                                                                    s, std::move(dense)));
      core->SetEpoch(1);
      auto service = std::make_unique<GrpcParameterServer>(core.get());
      auto server = StartGrpcServer("127.0.0.1", 0, {service.get()}, 2);
      if (!server.ok()) return nullptr;
      v1::NodeInfo* info = cluster->map_.add_servers();
      info->set_id(s);
      info->set_address(server->address);
      info->set_state(v1::NODE_ACTIVE);
      cluster->cores_.push_back(std::move(core));
      cluster->services_.push_back(std::move(service));
      cluster->servers_.push_back(std::move(*server));
    }
    return cluster;
  }

  ~TestCluster() {
    for (auto& s : servers_) s.server->Shutdown();
  }

  const v1::ClusterMap& map() const { return map_; }
  ParameterServerCore* core(int s) { return cores_[s].get(); }
  const std::string& address(int s) const { return servers_[s].address; }

 private:
  TestCluster() = default;
  v1::ClusterMap map_;
  std::vector<std::unique_ptr<ParameterServerCore>> cores_;
  std::vector<std::unique_ptr<GrpcParameterServer>> services_;
  std::vector<GrpcServer> servers_;
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

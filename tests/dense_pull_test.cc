// A pipelined worker's dense pull names the version at which it already holds each tensor
// (its own replay of its last update): the server sends the weights and optimizer state only
// when the tensor is no longer at that version (docs/design.md, "Pipelined steps").
// Parameter servers over real gRPC.
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dense_math.h"
#include "domain/spec_config.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"
#include "tests/test_cluster.h"
#include "worker/ps_client.h"

namespace ecps {
namespace {

constexpr char kToken[] = "dense-pull";

class DensePullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = SmallSpec(2, 1);
    spec_.optimizer.dense.type = DenseOptimizerType::kAdam;  // state: twice the weights
    cluster_ = TestCluster::Start(spec_, kToken);
    ASSERT_NE(cluster_, nullptr);
    sizes_ = DenseTensorSizes(ToDlrmConfig(spec_.model));
    auto ps = PsClient::Create(cluster_->map(), spec_.model.table_rows,
                               spec_.model.embedding_dim, sizes_, kToken, "test-worker", 10000);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    stub_ = v1::ParameterServer::NewStub(MakeChannel(cluster_->address(0), Role::kServer));
  }

  // A raw dense pull of tensor 0 (its primary is server 0) with state, holding `held`.
  v1::PullDenseResponse PullTensor0(int64_t held) {
    v1::PullDenseRequest req;
    FillHeader(req.mutable_header(), kToken, 1, "test");
    req.add_tensors(0);
    req.set_with_state(true);
    req.add_held_versions(held);
    v1::PullDenseResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->PullDense(&ctx, req, &resp).ok());
    return resp;
  }

  JobSpec spec_;
  std::unique_ptr<TestCluster> cluster_;
  std::vector<int64_t> sizes_;
  std::unique_ptr<PsClient> ps_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
};

TEST_F(DensePullTest, ServerSendsStateOnlyWhenTheHeldVersionIsStale) {
  std::vector<std::vector<float>> grads;
  for (int64_t size : sizes_) grads.emplace_back(size, 0.25f);
  ASSERT_TRUE(ps_->Push({}, {}, grads).ok());  // every tensor now at version 1
  const v1::PullDenseResponse current = PullTensor0(1);
  ASSERT_EQ(current.values_size(), 1);
  EXPECT_EQ(current.versions(0), 1);
  EXPECT_TRUE(current.values(0).empty());
  EXPECT_TRUE(current.states(0).empty());
  const v1::PullDenseResponse stale = PullTensor0(0);
  ASSERT_EQ(stale.values_size(), 1);
  EXPECT_EQ(stale.versions(0), 1);
  EXPECT_EQ(stale.values(0).size(), sizes_[0] * sizeof(float));
  EXPECT_EQ(stale.states(0).size(), 2 * sizes_[0] * sizeof(float));  // Adam: two moments
}

TEST_F(DensePullTest, ClientKeepsItsCopyOfTensorsStillAtTheHeldVersion) {
  std::vector<std::vector<float>> grads;
  for (int64_t size : sizes_) grads.emplace_back(size, 0.25f);
  ASSERT_TRUE(ps_->Push({}, {}, grads).ok());
  std::vector<std::vector<float>> full, full_state;
  std::vector<int64_t> versions;
  ASSERT_TRUE(ps_->PullDense(&full, &full_state, &versions).ok());
  ASSERT_EQ(versions.size(), sizes_.size());
  // Held at the current version except tensor 0, held one update behind.
  std::vector<int64_t> held = versions;
  held[0] -= 1;
  std::vector<std::vector<float>> tensors(sizes_.size()), states(sizes_.size());
  std::vector<int64_t> got;
  std::vector<char> as_held;
  ASSERT_TRUE(ps_->PullDense(&tensors, &states, &got, &held, &as_held).ok());
  EXPECT_EQ(got, versions);
  ASSERT_EQ(as_held.size(), sizes_.size());
  EXPECT_EQ(as_held[0], 0);
  EXPECT_EQ(tensors[0], full[0]);
  EXPECT_EQ(states[0], full_state[0]);
  for (size_t i = 1; i < sizes_.size(); ++i) {
    EXPECT_EQ(as_held[i], 1) << "tensor " << i;
    EXPECT_TRUE(tensors[i].empty()) << "tensor " << i << " was sent again";
    EXPECT_TRUE(states[i].empty()) << "tensor " << i;
  }
}

}  // namespace
}  // namespace ecps

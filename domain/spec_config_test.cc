#include "domain/spec_config.h"

#include "gtest/gtest.h"

namespace ecps {
namespace {

TEST(SpecConfig, ModelCarriesTheShape) {
  ModelSection m;
  m.num_dense = 5;
  m.num_sparse = 7;
  m.embedding_dim = 8;
  m.bottom_mlp = {32, 8};
  m.top_mlp = {24};
  const DlrmConfig c = ToDlrmConfig(m);
  EXPECT_EQ(c.num_dense, 5);
  EXPECT_EQ(c.num_sparse, 7);
  EXPECT_EQ(c.embedding_dim, 8);
  EXPECT_EQ(c.bottom_mlp, (std::vector<int>{32, 8}));
  EXPECT_EQ(c.top_mlp, (std::vector<int>{24}));
}

TEST(SpecConfig, SparseOptimizerMapsEveryType) {
  SparseOptimizer o;
  o.lr = 0.5f;
  o.eps = 0.25f;
  o.initial_accumulator = 0.125f;
  o.type = SparseOptimizerType::kSgd;
  EXPECT_EQ(ToSparseOptimizerConfig(o).rule, SparseUpdateRule::kSgd);
  o.type = SparseOptimizerType::kRowwiseAdagrad;
  EXPECT_EQ(ToSparseOptimizerConfig(o).rule, SparseUpdateRule::kRowwiseAdagrad);
  o.type = SparseOptimizerType::kAdagrad;
  const SparseOptimizerConfig c = ToSparseOptimizerConfig(o);
  EXPECT_EQ(c.rule, SparseUpdateRule::kAdagrad);
  EXPECT_EQ(c.lr, 0.5f);
  EXPECT_EQ(c.eps, 0.25f);
  EXPECT_EQ(c.initial_accumulator, 0.125f);
}

TEST(SpecConfig, DenseOptimizerMapsEveryType) {
  DenseOptimizer o;
  o.lr = 0.5f;
  o.beta1 = 0.25f;
  o.beta2 = 0.75f;
  o.eps = 0.125f;
  o.type = DenseOptimizerType::kSgd;
  EXPECT_EQ(ToDenseOptimizerConfig(o).rule, DenseUpdateRule::kSgd);
  o.type = DenseOptimizerType::kAdagrad;
  EXPECT_EQ(ToDenseOptimizerConfig(o).rule, DenseUpdateRule::kAdagrad);
  o.type = DenseOptimizerType::kAdam;
  const DenseOptimizerConfig c = ToDenseOptimizerConfig(o);
  EXPECT_EQ(c.rule, DenseUpdateRule::kAdam);
  EXPECT_EQ(c.lr, 0.5f);
  EXPECT_EQ(c.beta1, 0.25f);
  EXPECT_EQ(c.beta2, 0.75f);
  EXPECT_EQ(c.eps, 0.125f);
}

}  // namespace
}  // namespace ecps

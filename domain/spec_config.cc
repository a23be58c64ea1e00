#include "domain/spec_config.h"

namespace ecps {
namespace {

SparseUpdateRule RuleOf(SparseOptimizerType type) {
  switch (type) {
    case SparseOptimizerType::kSgd:
      return SparseUpdateRule::kSgd;
    case SparseOptimizerType::kAdagrad:
      return SparseUpdateRule::kAdagrad;
    case SparseOptimizerType::kRowwiseAdagrad:
      return SparseUpdateRule::kRowwiseAdagrad;
  }
  return SparseUpdateRule::kSgd;  // not reached: the switch covers every type
}

DenseUpdateRule RuleOf(DenseOptimizerType type) {
  switch (type) {
    case DenseOptimizerType::kSgd:
      return DenseUpdateRule::kSgd;
    case DenseOptimizerType::kAdagrad:
      return DenseUpdateRule::kAdagrad;
    case DenseOptimizerType::kAdam:
      return DenseUpdateRule::kAdam;
  }
  return DenseUpdateRule::kSgd;  // not reached: the switch covers every type
}

}  // namespace

DlrmConfig ToDlrmConfig(const ModelSection& model) {
  DlrmConfig config;
  config.num_dense = model.num_dense;
  config.num_sparse = model.num_sparse;
  config.embedding_dim = model.embedding_dim;
  config.bottom_mlp = model.bottom_mlp;
  config.top_mlp = model.top_mlp;
  return config;
}

SparseOptimizerConfig ToSparseOptimizerConfig(const SparseOptimizer& optimizer) {
  SparseOptimizerConfig config;
  config.rule = RuleOf(optimizer.type);
  config.lr = optimizer.lr;
  config.eps = optimizer.eps;
  config.initial_accumulator = optimizer.initial_accumulator;
  return config;
}

DenseOptimizerConfig ToDenseOptimizerConfig(const DenseOptimizer& optimizer) {
  DenseOptimizerConfig config;
  config.rule = RuleOf(optimizer.type);
  config.lr = optimizer.lr;
  config.beta1 = optimizer.beta1;
  config.beta2 = optimizer.beta2;
  config.eps = optimizer.eps;
  return config;
}

}  // namespace ecps

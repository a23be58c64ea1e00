// Whole-model gradient check of Dlrm::ForwardBackward against central finite differences of
// the returned mean loss, w.r.t. every dense parameter and every pooled input, on a small
// model. Step h = 1e-3 (small, so no ReLU kink is crossed); an analytic gradient g passes when
// |g - fd| <= 3e-4 + 2e-2 * |fd| (float rounding of the loss contributes ~1e-4 to fd; a
// missing ReLU mask, a wrong transpose or a dropped interaction term misses by far more).
#include "kernels/dlrm.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ecps {
namespace {

DlrmConfig SmallModel() {
  DlrmConfig m;
  m.num_dense = 3;
  m.num_sparse = 3;
  m.embedding_dim = 4;
  m.bottom_mlp = {6, 4};
  m.top_mlp = {7, 5};
  return m;
}

TEST(Dlrm, CreateValidates) {
  DlrmConfig m = SmallModel();
  m.bottom_mlp = {6, 5};
  EXPECT_EQ(Dlrm::Create(m, 8).status().code(), absl::StatusCode::kInvalidArgument);
  m = SmallModel();
  m.bottom_mlp.clear();
  EXPECT_EQ(Dlrm::Create(m, 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Dlrm::Create(SmallModel(), 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Dlrm, TensorLayout) {
  auto m = Dlrm::Create(SmallModel(), 4);
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& t = (*m)->tensors();
  // bottom: 3->6, 6->4; top: (4 + 6 pairs)=10 -> 7 -> 5 -> 1.
  ASSERT_EQ(t.size(), 10u);
  EXPECT_EQ(t[0].name, "bottom.0.weight");
  EXPECT_EQ(t[0].size, 18);
  EXPECT_EQ(t[3].name, "bottom.1.bias");
  EXPECT_EQ(t[3].size, 4);
  EXPECT_EQ(t[4].name, "top.0.weight");
  EXPECT_EQ(t[4].size, 70);
  EXPECT_EQ(t[8].name, "top.2.weight");
  EXPECT_EQ(t[8].size, 5);
  EXPECT_EQ(t[9].size, 1);
  std::vector<std::vector<float>> a, b, c;
  (*m)->InitDense(1, &a);
  (*m)->InitDense(1, &b);
  (*m)->InitDense(2, &c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(static_cast<int64_t>(a[i].size()), t[i].size);
}

class DlrmGrad : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Dlrm::Create(SmallModel(), 2);  // smaller than the batch: must grow
    ASSERT_TRUE(m.ok());
    model_ = std::move(*m);
    model_->InitDense(3, &params_);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& p : params_)
      for (auto& x : p) x = u(rng) * 0.8f;  // non-zero biases too
    dense_.resize(kBatch * 3);
    for (auto& x : dense_) x = u(rng) + 1.0f;
    pooled_.resize(kBatch * 3 * 4);
    for (auto& x : pooled_) x = u(rng);
    labels_ = {1, 0, 0, 1, 1};
  }
  float Loss() {
    std::vector<const float*> ptrs;
    for (auto& p : params_) ptrs.push_back(p.data());
    std::vector<std::vector<float>> g(params_.size());
    std::vector<float*> gp;
    for (size_t i = 0; i < params_.size(); ++i) {
      g[i].resize(params_[i].size());
      gp.push_back(g[i].data());
    }
    std::vector<float> dp(pooled_.size());
    return model_->ForwardBackward(kBatch, dense_.data(), pooled_.data(), labels_.data(), ptrs,
                                   dp.data(), gp);
  }
  void Check(const char* what, std::vector<float>* v, const std::vector<float>& grad) {
    constexpr float h = 1e-3f;
    int checked = 0;
    for (size_t i = 0; i < v->size(); ++i) {
      const float orig = (*v)[i];
      (*v)[i] = orig + h;
      const double lp = Loss();
      (*v)[i] = orig - h;
      const double lm = Loss();
      (*v)[i] = orig;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 3e-4 + 2e-2 * std::fabs(fd)) << what << "[" << i << "]";
      ++checked;
    }
    EXPECT_GT(checked, 0);
  }
  static constexpr int kBatch = 5;
  std::unique_ptr<Dlrm> model_;
  std::vector<std::vector<float>> params_;
  std::vector<float> dense_, pooled_, labels_;
};

TEST_F(DlrmGrad, ParamsAndPooledMatchFiniteDifferences) {
  std::vector<const float*> ptrs;
  for (auto& p : params_) ptrs.push_back(p.data());
  std::vector<std::vector<float>> g(params_.size());
  std::vector<float*> gp;
  for (size_t i = 0; i < params_.size(); ++i) {
    g[i].assign(params_[i].size(), 123.0f);  // must be overwritten, not accumulated
    gp.push_back(g[i].data());
  }
  std::vector<float> dp(pooled_.size(), 123.0f), probs(kBatch);
  const float loss = model_->ForwardBackward(kBatch, dense_.data(), pooled_.data(), labels_.data(),
                                             ptrs, dp.data(), gp, probs.data());
  EXPECT_GT(loss, 0.0f);
  double nonzero = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (float x : g[i]) nonzero += x != 0;
    Check(model_->tensors()[i].name.c_str(), &params_[i], g[i]);
  }
  EXPECT_GT(nonzero, 50);
  Check("pooled", &pooled_, dp);

  // Forward gives the same probabilities.
  std::vector<float> probs2(kBatch);
  model_->Forward(kBatch, dense_.data(), pooled_.data(), ptrs, probs2.data());
  EXPECT_EQ(probs, probs2);
}

}  // namespace
}  // namespace ecps

namespace ecps {
namespace {

TEST(ParallelRunnerTest, EveryTaskRunsOnceOnItsMember) {
  ParallelRunner runner(3);
  for (int n : {0, 1, 2, 3, 7, 64}) {
    std::vector<int> runs(n, 0);
    std::vector<std::thread::id> ids(n);
    runner.Run(n, [&](int i) {
      ++runs[i];
      ids[i] = std::this_thread::get_id();
    });
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(runs[i], 1) << "n " << n << " task " << i;
      EXPECT_EQ(ids[i], ids[i % 3]) << "n " << n << " task " << i;  // member i % 3
    }
    if (n > 0) {
      EXPECT_EQ(ids[0], std::this_thread::get_id());  // the caller is member 0
    }
    if (n > 2) {
      EXPECT_NE(ids[1], ids[0]);  // the others run on the helpers
      EXPECT_NE(ids[2], ids[0]);
      EXPECT_NE(ids[2], ids[1]);
    }
  }
}

// Slices on three threads: the same loss and gradients as one thread up to float rounding of
// the summation order, and the same bits on every run.
TEST(Dlrm, ThreadsSliceTheBatchDeterministically) {
  DlrmConfig config;
  config.num_dense = 5;
  config.num_sparse = 4;
  config.embedding_dim = 8;
  config.bottom_mlp = {16, 8};
  config.top_mlp = {12};
  const int batch = 600;  // three slices of 200
  auto one = Dlrm::Create(config, batch, 1);
  auto three = Dlrm::Create(config, batch, 3);
  ASSERT_TRUE(one.ok() && three.ok());
  std::vector<std::vector<float>> params;
  (*one)->InitDense(7, &params);
  std::vector<const float*> pp;
  for (const auto& p : params) pp.push_back(p.data());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> dense(batch * 5), pooled(batch * 4 * 8), labels(batch);
  for (float& x : dense) x = normal(rng);
  for (float& x : pooled) x = normal(rng);
  for (int b = 0; b < batch; ++b) labels[b] = static_cast<float>(b % 3 == 0);
  struct Out {
    float loss;
    std::vector<std::vector<float>> grads;
    std::vector<float> d_pooled, probs;
  };
  auto run = [&](Dlrm* m) {
    Out o;
    o.grads.resize(params.size());
    std::vector<float*> gp;
    for (size_t i = 0; i < params.size(); ++i) {
      o.grads[i].assign(params[i].size(), 0.0f);
      gp.push_back(o.grads[i].data());
    }
    o.d_pooled.resize(pooled.size());
    o.probs.resize(batch);
    o.loss = m->ForwardBackward(batch, dense.data(), pooled.data(), labels.data(), pp,
                                o.d_pooled.data(), gp, o.probs.data());
    return o;
  };
  const Out a = run(one->get()), b = run(three->get()), c = run(three->get());
  EXPECT_NEAR(a.loss, b.loss, 1e-6);
  EXPECT_EQ(b.loss, c.loss);
  EXPECT_EQ(b.grads, c.grads);  // bit for bit
  EXPECT_EQ(b.d_pooled, c.d_pooled);
  auto near = [](const std::vector<float>& x, const std::vector<float>& y) {
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(x[i], y[i], 1e-7 + 1e-5 * std::fabs(x[i])) << i;
    }
  };
  near(a.d_pooled, b.d_pooled);
  near(a.probs, b.probs);
  for (size_t t = 0; t < params.size(); ++t) {
    for (size_t e = 0; e < params[t].size(); ++e) {
      EXPECT_NEAR(a.grads[t][e], b.grads[t][e], 1e-6 + 1e-5 * std::fabs(a.grads[t][e]))
          << (*one)->tensors()[t].name << "[" << e << "]";
    }
  }
  std::vector<float> fa(batch), fb(batch);
  (*one)->Forward(batch, dense.data(), pooled.data(), pp, fa.data());
  (*three)->Forward(batch, dense.data(), pooled.data(), pp, fb.data());
  near(fa, fb);
  EXPECT_EQ(Dlrm::Create(config, batch, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ecps

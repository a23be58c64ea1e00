#include "worker/metrics.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ecps {
namespace {

TEST(Metrics, AucHandExampleWithTies) {
  // Positives 0.9, 0.5, 0.5; negatives 0.5, 0.2, 0.1. Pairwise: 0.9 beats all 3 (3); each
  // positive 0.5 ties the negative 0.5 (1/2) and beats 0.2 and 0.1 (2) -> 2.5 each.
  // AUC = (3 + 2.5 + 2.5) / 9 = 8/9.
  const std::vector<float> p = {0.9f, 0.5f, 0.5f, 0.2f, 0.5f, 0.1f};
  const std::vector<float> y = {1, 1, 0, 0, 1, 0};
  EXPECT_NEAR(Auc(p, y), 8.0 / 9.0, 1e-12);
}

TEST(Metrics, AucExtremes) {
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.2f, 0.8f, 0.9f}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.2f, 0.8f, 0.9f}, {1, 1, 0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({0.5f, 0.5f, 0.5f, 0.5f}, {1, 0, 1, 0}), 0.5);  // all tied
  EXPECT_DOUBLE_EQ(Auc({0.3f, 0.4f}, {1, 1}), 0.5);                    // one class
}

TEST(Metrics, LogLossHandExample) {
  const std::vector<float> p = {0.9f, 0.5f, 0.2f, 0.0f};
  const std::vector<float> y = {1, 0, 0, 0};
  const double expect =
      -(std::log(0.9) + std::log(0.5) + std::log(0.8) + std::log(1.0 - 1e-7)) / 4.0;
  EXPECT_NEAR(LogLoss(p, y), expect, 1e-6);
  // A confident mistake is clamped, not infinite.
  EXPECT_NEAR(LogLoss({0.0f}, {1}), -std::log(1e-7), 1e-6);
}

}  // namespace
}  // namespace ecps

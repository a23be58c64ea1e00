#include "worker/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ecps {

double Auc(const std::vector<float>& probs, const std::vector<float>& labels) {
  const size_t n = std::min(probs.size(), labels.size());
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] < probs[b]; });
  double pos_rank_sum = 0;
  double pos = 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    double group_pos = 0;
    while (j < n && probs[order[j]] == probs[order[i]]) {
      group_pos += labels[order[j]] > 0.5f ? 1 : 0;
      ++j;
    }
    // Ranks i+1 .. j, average (i + 1 + j) / 2.
    pos_rank_sum += group_pos * (static_cast<double>(i + 1 + j) / 2.0);
    pos += group_pos;
    i = j;
  }
  const double neg = static_cast<double>(n) - pos;
  if (pos == 0 || neg == 0) return 0.5;
  return (pos_rank_sum - pos * (pos + 1) / 2.0) / (pos * neg);
}

double LogLoss(const std::vector<float>& probs, const std::vector<float>& labels) {
  const size_t n = std::min(probs.size(), labels.size());
  if (n == 0) return 0;
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = std::clamp(static_cast<double>(probs[i]), 1e-7, 1 - 1e-7);
    total -= labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
  }
  return total / static_cast<double>(n);
}

}  // namespace ecps

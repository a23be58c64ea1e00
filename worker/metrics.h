// Evaluation metrics over (probability, label) pairs. Labels are 0 or 1.
#ifndef ECPS_WORKER_METRICS_H_
#define ECPS_WORKER_METRICS_H_

#include <vector>

namespace ecps {

// Exact ROC AUC: the Mann-Whitney statistic with tied scores given their average rank (a
// tie between a positive and a negative counts 1/2). 0.5 when either class is absent.
double Auc(const std::vector<float>& probs, const std::vector<float>& labels);

// Mean binary cross-entropy; probabilities are clamped to [1e-7, 1 - 1e-7]. 0 when empty.
double LogLoss(const std::vector<float>& probs, const std::vector<float>& labels);

}  // namespace ecps

#endif  // ECPS_WORKER_METRICS_H_

#include "cli/timeline.h"

#include <algorithm>

namespace ecps {

double SamplesAt(const std::vector<TimelinePoint>& tl, double t) {
  if (tl.empty()) return 0;
  if (t <= tl.front().t) return tl.front().samples;
  if (t >= tl.back().t) return tl.back().samples;
  auto it = std::lower_bound(tl.begin(), tl.end(), t,
                             [](const TimelinePoint& p, double x) { return p.t < x; });
  const TimelinePoint& b = *it;
  const TimelinePoint& a = *(it - 1);
  if (b.t <= a.t) return b.samples;
  return a.samples + (b.samples - a.samples) * (t - a.t) / (b.t - a.t);
}

double MeanRate(const std::vector<TimelinePoint>& tl, double t0, double t1) {
  if (tl.empty()) return -1;
  t0 = std::max(t0, tl.front().t);
  t1 = std::min(t1, tl.back().t);
  if (t1 - t0 < 1e-3) return -1;
  return (SamplesAt(tl, t1) - SamplesAt(tl, t0)) / (t1 - t0);
}

double TrainingStart(const std::vector<TimelinePoint>& tl) {
  if (tl.empty()) return -1;
  double start = tl.front().t;
  for (const TimelinePoint& p : tl) {
    if (p.samples > tl.front().samples) break;
    start = p.t;
  }
  return start;
}

double RateBefore(const std::vector<TimelinePoint>& tl, double t, double seconds) {
  return MeanRate(tl, std::max(t - seconds, TrainingStart(tl)), t);
}

double TrainingEnd(const std::vector<TimelinePoint>& tl) {
  if (tl.empty()) return -1;
  const double final_samples = tl.back().samples;
  for (const TimelinePoint& p : tl) {
    if (p.samples >= final_samples) return p.t;
  }
  return tl.back().t;
}

double MeanRateWhileTraining(const std::vector<TimelinePoint>& tl, double t0, double t1) {
  return MeanRate(tl, t0, std::min(t1, TrainingEnd(tl)));
}

}  // namespace ecps

// The metrics timeline `ecps run` keeps in memory (cumulative samples over the launcher's
// time) and the rates its report derives from it.
#ifndef ECPS_CLI_TIMELINE_H_
#define ECPS_CLI_TIMELINE_H_

#include <vector>

namespace ecps {

struct TimelinePoint {
  double t;        // seconds on the launcher's clock
  double samples;  // cumulative samples trained
};

// Cumulative samples at time t, interpolated linearly between timeline points.
double SamplesAt(const std::vector<TimelinePoint>& tl, double t);

// Mean samples/s over [t0, t1] (clamped to the timeline); negative when unknown.
double MeanRate(const std::vector<TimelinePoint>& tl, double t0, double t1);

// When training began: the last point that still holds the first point's count (the time
// before it, starting processes and initialising tables, trained nothing). Negative for an
// empty timeline.
double TrainingStart(const std::vector<TimelinePoint>& tl);

// Mean samples/s over the `seconds` before time t, or over the training before t when it
// began later (TrainingStart): the start-up before the first trained step does not count
// as training at a low rate. Negative when unknown.
double RateBefore(const std::vector<TimelinePoint>& tl, double t, double seconds);

// When the last sample was trained: the first point that holds the final count (the end of
// the timeline when it is still growing). Negative for an empty timeline.
double TrainingEnd(const std::vector<TimelinePoint>& tl);

// Mean samples/s over [t0, t1] while training ran: the window ends when the last sample
// was trained (a recovery that outlasts the job does not count the idle time after it).
// Negative when unknown.
double MeanRateWhileTraining(const std::vector<TimelinePoint>& tl, double t0, double t1);

}  // namespace ecps

#endif  // ECPS_CLI_TIMELINE_H_

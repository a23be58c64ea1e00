// A worker's /metrics: its own progress, from the same WorkerProgress its heartbeats carry
// (the job's totals are the coordinator's: coordinator/job_metrics.h).
#ifndef ECPS_WORKER_WORKER_METRICS_H_
#define ECPS_WORKER_WORKER_METRICS_H_

#include "proto/ecps.pb.h"
#include "runtime/metrics.h"

namespace ecps {

void AddWorkerMetrics(int id, const v1::WorkerProgress& progress, MetricsBuilder* out);

}  // namespace ecps

#endif  // ECPS_WORKER_WORKER_METRICS_H_

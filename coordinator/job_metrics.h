// The coordinator's /metrics: the job as its status shows it (one StatusResponse per
// scrape), so Prometheus and `ecps status` never disagree. Each role serves the figures it
// owns: the coordinator the job (step, samples, loss, AUC, phase), every node's state, the
// failures and recoveries and the latest scrub and checkpoint; a server its own rows,
// rebuild and delta streams (ps/server_metrics.h); a worker its own progress.
#ifndef ECPS_COORDINATOR_JOB_METRICS_H_
#define ECPS_COORDINATOR_JOB_METRICS_H_

#include "proto/ecps.pb.h"
#include "runtime/metrics.h"

namespace ecps {

void AddJobMetrics(const v1::StatusResponse& status, MetricsBuilder* out);

}  // namespace ecps

#endif  // ECPS_COORDINATOR_JOB_METRICS_H_

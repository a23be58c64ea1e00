// A parameter server's /metrics: its rows, requests, rebuild and delta streams, from the
// same ServerStats its heartbeats carry (the coordinator's /metrics has the job and every
// node's state: coordinator/job_metrics.h).
#ifndef ECPS_PS_SERVER_METRICS_H_
#define ECPS_PS_SERVER_METRICS_H_

#include "proto/ecps.pb.h"
#include "runtime/metrics.h"

namespace ecps {

// `id`: the server's logical id (-1: a standby spare).
void AddServerMetrics(int id, const v1::ServerStats& stats, MetricsBuilder* out);

// What its grpc.health.v1 readiness ("ecps.v1.ParameterServer") says in `state`: SERVING
// when ACTIVE and when RECOVERING (a replacement answers every pull of its shard, rebuilding
// rows on demand); not while it starts, as a standby spare (no shard) or once dead.
bool ServerReady(v1::NodeState state);

}  // namespace ecps

#endif  // ECPS_PS_SERVER_METRICS_H_

// `ecps run` writes <output_dir>/prometheus_targets.json: every role's /metrics address in
// Prometheus' file-based service discovery format (file_sd_configs), rewritten whenever a
// role comes or goes, so that a Prometheus on the same machine scrapes a local job with no
// other configuration (docs/deploy.md, "Metrics").
#ifndef ECPS_CLI_PROMETHEUS_TARGETS_H_
#define ECPS_CLI_PROMETHEUS_TARGETS_H_

#include <string>

#include "proto/ecps.pb.h"

namespace ecps {

// The file's text for the roles in `status` that serve /metrics: one target group per role,
// labelled ecps_job, ecps_role and ecps_id (a standby spare has id -1). The labels are not
// role and id: those name the node in the coordinator's own series (ecps_node_state).
std::string PrometheusTargets(const v1::StatusResponse& status);

}  // namespace ecps

#endif  // ECPS_CLI_PROMETHEUS_TARGETS_H_

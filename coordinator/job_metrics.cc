#include "coordinator/job_metrics.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ecps {
namespace {

// The state label of ecps_node_state: the metrics' own names, whatever the proto calls them.
const char* StateLabel(v1::NodeState state) {
  switch (state) {
    case v1::NODE_STARTING: return "starting";
    case v1::NODE_ACTIVE: return "active";
    case v1::NODE_STANDBY: return "standby";
    case v1::NODE_RECOVERING: return "recovering";
    case v1::NODE_SUSPECT: return "suspect";
    case v1::NODE_DEAD: return "dead";
    case v1::NODE_FINISHED: return "finished";
    default: return "unspecified";
  }
}

// The job as a whole: what it is, its phase, progress, rate, loss and data loss.
void AddJobProgress(const v1::StatusResponse& status, MetricsBuilder* out) {
  out->Gauge("ecps_job_info", "The job: its name and fault tolerance (value always 1)", 1,
             {{"job", status.job()},
              {"mode", status.mode()},
              {"k", absl::StrCat(status.k())},
              {"r", absl::StrCat(status.r())}});
  // An enum as one series per value, 1 for the current one (Prometheus' convention).
  out->Gauge("ecps_job_phase", "1 for the job's current phase, 0 for the others");
  for (v1::JobPhase phase : {v1::JOB_STARTING, v1::JOB_RUNNING, v1::JOB_RECOVERING,
                             v1::JOB_FINISHED, v1::JOB_FAILED}) {
    out->Add(status.phase() == phase ? 1 : 0, {{"phase", PhaseName(phase)}});
  }
  out->Gauge("ecps_job_epoch", "Cluster map epoch (grows with every failure handled)",
             static_cast<double>(status.epoch()));
  out->Gauge("ecps_job_step", "Training steps completed (the slowest worker's)",
             static_cast<double>(status.step()));
  out->Gauge("ecps_job_steps", "Training steps the job runs (job.steps)",
             static_cast<double>(status.total_steps()));
  out->Counter("ecps_job_samples_total", "Samples trained on, over every worker",
               static_cast<double>(status.samples()));
  out->Counter("ecps_abft_detections_total",
               "Training steps computed again because a GEMM failed its checksum (worker.abft), "
               "over every worker",
               static_cast<double>(status.abft_detections()));
  out->Gauge("ecps_job_samples_per_second", "Training rate over every worker",
             status.samples_per_s());
  out->Gauge("ecps_job_loss", "Mean training loss over the last report interval", status.loss());
  if (status.eval_auc() >= 0) {
    out->Gauge("ecps_job_eval_auc", "Latest held-out AUC", status.eval_auc());
    out->Gauge("ecps_job_eval_logloss", "Latest held-out log loss", status.eval_logloss());
  }
  out->Gauge("ecps_job_elapsed_seconds", "Time since the job started", status.elapsed_s());
  if (status.eta_s() >= 0) {
    out->Gauge("ecps_job_eta_seconds", "Estimated time to the last step", status.eta_s());
  }
  out->Gauge("ecps_job_data_lost",
             "1 when more than r members of a stripe are gone: those rows cannot be rebuilt",
             status.data_lost() ? 1 : 0);
}

// Every node's state and heartbeat age.
void AddNodeMetrics(const v1::StatusResponse& status, MetricsBuilder* out) {
  out->Gauge("ecps_node_state", "1 for each node's current state, 0 for the others");
  for (const v1::NodeInfo& node : status.nodes()) {
    for (v1::NodeState state : {v1::NODE_STARTING, v1::NODE_ACTIVE, v1::NODE_STANDBY,
                                v1::NODE_RECOVERING, v1::NODE_SUSPECT, v1::NODE_DEAD,
                                v1::NODE_FINISHED}) {
      out->Add(node.state() == state ? 1 : 0, {{"role", RoleLabel(node.role())},
                                               {"id", absl::StrCat(node.id())},
                                               {"state", StateLabel(state)}});
    }
  }
  out->Gauge("ecps_node_heartbeat_age_seconds", "Time since each node's last heartbeat");
  for (const v1::NodeInfo& node : status.nodes()) {
    if (node.heartbeat_age_ms() < 0) continue;
    out->Add(node.heartbeat_age_ms() / 1000.0,
             {{"role", RoleLabel(node.role())}, {"id", absl::StrCat(node.id())}});
  }
}

void AddFailureMetrics(const v1::StatusResponse& status, MetricsBuilder* out) {
  // Failures by role; recoveries are the failures whose replacement is serving again.
  std::map<std::string, std::pair<int, int>> by_role = {{"server", {0, 0}}, {"worker", {0, 0}}};
  double last_recovery_s = -1;
  for (const v1::FailureEvent& failure : status.failures()) {
    auto& counts = by_role[RoleLabel(failure.role())];
    ++counts.first;
    if (failure.state() == v1::FAILURE_RECOVERED) {
      ++counts.second;
      last_recovery_s = failure.recovery_s();
    }
  }
  out->Counter("ecps_node_failures_total", "Nodes declared dead, by role");
  for (const auto& [role, counts] : by_role) out->Add(counts.first, {{"role", role}});
  out->Counter("ecps_node_recoveries_total",
               "Failures whose replacement serves again (a server ACTIVE, a worker training)");
  for (const auto& [role, counts] : by_role) out->Add(counts.second, {{"role", role}});
  if (last_recovery_s >= 0) {
    out->Gauge("ecps_last_recovery_seconds",
               "Detection to full service of the latest recovered failure", last_recovery_s);
  }
}

// The latest scrub, once one has run.
void AddScrubMetrics(const v1::StatusResponse& status, MetricsBuilder* out) {
  const v1::ScrubReport& scrub = status.scrub();
  if (scrub.done()) {
    out->Gauge("ecps_scrub_clean", "1 when the latest scrub found every parity and replica equal",
               scrub.clean() && scrub.error().empty() ? 1 : 0);
    out->Gauge("ecps_scrub_stripes_checked", "Stripes the latest scrub checked",
               static_cast<double>(scrub.stripes_checked()));
    out->Gauge("ecps_scrub_parity_mismatches", "Parity rows the latest scrub found wrong",
               static_cast<double>(scrub.parity_mismatches()));
    out->Gauge("ecps_scrub_dense_mismatches", "Dense replicas the latest scrub found different",
               static_cast<double>(scrub.dense_mismatches()));
    out->Gauge("ecps_scrub_failed", "1 when the latest scrub could not run to its end",
               scrub.error().empty() ? 0 : 1);
    out->Gauge("ecps_scrub_duration_seconds", "How long the latest scrub took", scrub.seconds());
  }
}

// The latest checkpoint, once one has been taken.
void AddCheckpointMetrics(const v1::StatusResponse& status, MetricsBuilder* out) {
  const v1::CheckpointReport& checkpoint = status.checkpoint();
  if (checkpoint.done()) {
    out->Gauge("ecps_checkpoint_step", "Step of the latest committed checkpoint",
               checkpoint.error().empty() ? static_cast<double>(checkpoint.step()) : -1);
    out->Gauge("ecps_checkpoint_duration_seconds", "Freeze to unfreeze of the latest checkpoint",
               checkpoint.seconds());
    out->Gauge("ecps_checkpoint_size_bytes", "Bytes the latest checkpoint wrote",
               static_cast<double>(checkpoint.bytes()));
  }
}

}  // namespace

void AddJobMetrics(const v1::StatusResponse& status, MetricsBuilder* out) {
  AddJobProgress(status, out);
  AddNodeMetrics(status, out);
  AddFailureMetrics(status, out);
  AddScrubMetrics(status, out);
  AddCheckpointMetrics(status, out);
}

}  // namespace ecps

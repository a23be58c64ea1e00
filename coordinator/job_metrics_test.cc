// The coordinator's /metrics from a status: the job, every node's state, failures and
// recoveries, the latest scrub.
#include "coordinator/job_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ecps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Text(const v1::StatusResponse& status) {
  MetricsBuilder b;
  AddJobMetrics(status, &b);
  return MetricsText(b.Take());
}

v1::StatusResponse RunningJob() {
  v1::StatusResponse s;
  s.set_job("j");
  s.set_phase(v1::JOB_RECOVERING);
  s.set_mode("erasure_code");
  s.set_k(4);
  s.set_r(1);
  s.set_step(120);
  s.set_total_steps(1000);
  s.set_samples(61440);
  s.set_samples_per_s(4096.5);
  s.set_loss(0.45);
  s.set_eval_auc(-1);  // none yet
  s.set_eta_s(-1);
  v1::NodeInfo* server = s.add_nodes();
  server->set_role(v1::ROLE_SERVER);
  server->set_id(2);
  server->set_state(v1::NODE_RECOVERING);
  server->set_heartbeat_age_ms(150);
  v1::NodeInfo* worker = s.add_nodes();
  worker->set_role(v1::ROLE_WORKER);
  worker->set_id(0);
  worker->set_state(v1::NODE_ACTIVE);
  worker->set_heartbeat_age_ms(-1);  // no heartbeat yet
  v1::FailureEvent* recovered = s.add_failures();
  recovered->set_role(v1::ROLE_SERVER);
  recovered->set_state(v1::FAILURE_RECOVERED);
  recovered->set_recovery_s(3.25);
  v1::FailureEvent* replacing = s.add_failures();
  replacing->set_role(v1::ROLE_SERVER);
  replacing->set_state(v1::FAILURE_REPLACING);
  return s;
}

TEST(JobMetricsTest, TheJobAsItsStatusShowsIt) {
  const std::string text = Text(RunningJob());
  EXPECT_THAT(text, HasSubstr("ecps_job_info{job=\"j\",mode=\"erasure_code\",k=\"4\",r=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("ecps_job_phase{phase=\"recovering\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ecps_job_phase{phase=\"running\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE ecps_job_samples_total counter\necps_job_samples_total 61440\n"));
  EXPECT_THAT(text, HasSubstr("ecps_job_samples_per_second 4096.5\n"));
  EXPECT_THAT(text, HasSubstr("ecps_job_step 120\n"));
  // No evaluation and no ETA yet: no series rather than a -1 that a graph would plot.
  EXPECT_THAT(text, Not(HasSubstr("ecps_job_eval_auc")));
  EXPECT_THAT(text, Not(HasSubstr("ecps_job_eta_seconds")));
}

TEST(JobMetricsTest, NodeStatesAreOneHot) {
  const std::string text = Text(RunningJob());
  EXPECT_THAT(text, HasSubstr("ecps_node_state{role=\"server\",id=\"2\",state=\"recovering\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ecps_node_state{role=\"server\",id=\"2\",state=\"active\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("ecps_node_state{role=\"worker\",id=\"0\",state=\"active\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ecps_node_heartbeat_age_seconds{role=\"server\",id=\"2\"} 0.15\n"));
  EXPECT_THAT(text, Not(HasSubstr("ecps_node_heartbeat_age_seconds{role=\"worker\"")));
}

TEST(JobMetricsTest, FailuresAndRecoveriesByRole) {
  const std::string text = Text(RunningJob());
  EXPECT_THAT(text, HasSubstr("ecps_node_failures_total{role=\"server\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ecps_node_failures_total{role=\"worker\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("ecps_node_recoveries_total{role=\"server\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("ecps_last_recovery_seconds 3.25\n"));
}

TEST(JobMetricsTest, TheLatestScrubOnceThereIsOne) {
  v1::StatusResponse s = RunningJob();
  EXPECT_THAT(Text(s), Not(HasSubstr("ecps_scrub_")));
  s.mutable_scrub()->set_done(true);
  s.mutable_scrub()->set_clean(false);
  s.mutable_scrub()->set_stripes_checked(500);
  s.mutable_scrub()->set_parity_mismatches(2);
  const std::string text = Text(s);
  EXPECT_THAT(text, HasSubstr("ecps_scrub_clean 0\n"));
  EXPECT_THAT(text, HasSubstr("ecps_scrub_parity_mismatches 2\n"));
  EXPECT_THAT(text, HasSubstr("ecps_scrub_stripes_checked 500\n"));
  EXPECT_THAT(text, HasSubstr("ecps_scrub_failed 0\n"));
}

}  // namespace
}  // namespace ecps

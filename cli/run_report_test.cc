#include "cli/run_report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ecps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

JobFacts Facts() {
  JobFacts f;
  f.name = "criteo \"small\"";
  f.mode = "erasure_code";
  f.servers = 3;
  f.workers = 2;
  f.steps_asked = 100;
  f.samples_asked = 1600;
  f.max_bad_lines = 10;
  return f;
}

v1::NodeInfo* AddWorker(v1::StatusResponse* st, int id) {
  v1::NodeInfo* n = st->add_nodes();
  n->set_role(v1::ROLE_WORKER);
  n->set_id(id);
  n->set_state(v1::NODE_FINISHED);
  return n;
}

// A finished job whose server 1 was killed by a drill at t = 20 s and rebuilt by t = 30 s.
v1::StatusResponse Finished() {
  v1::StatusResponse st;
  st.set_job("criteo-small");
  st.set_phase(v1::JOB_FINISHED);
  st.set_step(100);
  st.set_samples(1600);
  st.set_elapsed_s(40);
  st.set_eval_auc(0.7123456);
  st.set_eval_logloss(0.4567891);
  v1::ScrubReport* scrub = st.mutable_scrub();
  scrub->set_done(true);
  scrub->set_clean(true);
  scrub->set_stripes_checked(48);
  scrub->set_dense_checked(3);
  scrub->set_seconds(0.25);
  v1::FailureEvent* e = st.add_failures();
  e->set_role(v1::ROLE_SERVER);
  e->set_id(1);
  e->set_pid(4242);
  e->set_reason("exited \"badly\"\n");
  e->set_state(v1::FAILURE_RECOVERED);
  e->set_replacement("server-1-r1");
  e->set_replacement_pid(4300);
  e->set_detection_s(1.5);
  e->set_rebuild_s(8.5);
  e->set_recovery_s(10);
  e->set_rows_rebuilt(900);
  e->set_on_demand_rebuilds(40);
  e->set_rebuild_mb_s(12.5);
  e->set_detected_unix_ms(1021500);
  e->set_recovered_unix_ms(1030000);
  AddWorker(&st, 0);
  AddWorker(&st, 1);
  return st;
}

RunRecord DrilledRun() {
  RunRecord run;
  run.have_status = true;
  run.ok = true;
  run.wall_s = 41.23456;
  run.start_unix = 1000;
  // 100 samples/s until the failure at 20 s, 50 while it recovered, 50 after.
  run.timeline = {{0, 0}, {10, 1000}, {20, 2000}, {30, 2500}, {40, 3000}};
  FaultSpec kill;
  kill.action = FaultAction::kKillServer;
  kill.target = 1;
  kill.at_step = 50;
  run.drills.push_back(DrillRecord{kill, 20, 4242});
  return run;
}

TEST(RunReportTest, ReportIsValidJsonWithTheRunsFigures) {
  const std::string text = ReportJson(Facts(), DrilledRun(), Finished());
  const Json r = Json::parse(text);
  EXPECT_EQ(r["job"], "criteo \"small\"");
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["error"], "");
  EXPECT_EQ(r["mode"], "erasure_code");
  EXPECT_EQ(r["steps"], 100);
  EXPECT_EQ(r["samples_asked"], 1600);
  EXPECT_EQ(r["data_epoch"], 0) << "a report without data.epochs";
  EXPECT_EQ(r["data_exhausted"], false);
  EXPECT_DOUBLE_EQ(r["wall_seconds"].get<double>(), 41.235);
  EXPECT_DOUBLE_EQ(r["samples_per_s"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(r["eval_auc"].get<double>(), 0.712346);
  EXPECT_EQ(r["scrub"]["stripes_checked"], 48);
  ASSERT_EQ(r["drills"].size(), 1u);
  EXPECT_EQ(r["drills"][0]["action"], "kill_server");
  EXPECT_EQ(r["drills"][0]["pid"], 4242);
  EXPECT_DOUBLE_EQ(r["drills"][0]["time_s"].get<double>(), 20.0);
  ASSERT_EQ(r["failures"].size(), 1u);
  const Json& f = r["failures"][0];
  EXPECT_EQ(f["node"], "server 1");
  EXPECT_EQ(f["reason"], "exited \"badly\"\n");
  EXPECT_EQ(f["state"], "recovered");
  EXPECT_EQ(f["by_spare"], false);
  // The failure happened when the drill ran; detection and recovery on the launcher's clock.
  EXPECT_DOUBLE_EQ(f["failed_at_s"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(f["detected_at_s"].get<double>(), 21.5);
  EXPECT_DOUBLE_EQ(f["recovered_at_s"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(f["samples_per_s_before"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(f["samples_per_s_during"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(f["throughput_during_vs_before"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(f["rebuild_mb_s"].get<double>(), 12.5);
  EXPECT_EQ(r["final_status"]["job"], "criteo-small");
  EXPECT_EQ(r["final_status"]["phase"], "JOB_FINISHED");
}

TEST(RunReportTest, KeepsTheLayoutScriptsGrep) {
  const std::string text = ReportJson(Facts(), DrilledRun(), Finished());
  EXPECT_THAT(text, HasSubstr("\n  \"ok\": true,\n"));
  EXPECT_THAT(text, HasSubstr("\n  \"steps\": 100,\n"));
  EXPECT_THAT(text, HasSubstr("\"scrub\": {\"done\": true, \"clean\": true, "));
  EXPECT_THAT(text, HasSubstr("\"failures\": [\n    {\"node\": \"server 1\", "));
  EXPECT_EQ(text.rfind("{\n  \"job\": ", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 4), "}\n}\n");
}

TEST(RunReportTest, UnknownFiguresAreNullAndNoStatusIsNull) {
  RunRecord run = DrilledRun();
  run.have_status = false;
  run.ok = false;
  run.failure = "the coordinator exited before the job finished";
  run.drills.clear();
  v1::StatusResponse st = Finished();
  v1::FailureEvent* e = st.mutable_failures(0);
  e->set_state(v1::FAILURE_DETECTED);
  e->set_recovered_unix_ms(0);
  e->set_last_heartbeat_unix_ms(0);
  e->set_rebuild_s(-1);
  e->set_rebuild_mb_s(0);
  const Json r = Json::parse(ReportJson(Facts(), run, st));
  EXPECT_EQ(r["ok"], false);
  EXPECT_EQ(r["error"], "the coordinator exited before the job finished");
  EXPECT_TRUE(r["final_status"].is_null());
  const Json& f = r["failures"][0];
  EXPECT_EQ(f["state"], "detected");
  EXPECT_TRUE(f["failed_at_s"].is_null());
  EXPECT_TRUE(f["recovered_at_s"].is_null());
  EXPECT_TRUE(f["rebuild_s"].is_null());
  EXPECT_TRUE(f["rebuild_mb_s"].is_null());
  EXPECT_TRUE(f["throughput_during_vs_before"].is_null());
  EXPECT_TRUE(r["drills"].is_array() && r["drills"].empty());
}

TEST(RunReportTest, BadLinesFromEveryWorkerFiveAtMostAndExhaustion) {
  v1::StatusResponse st = Finished();
  for (int w = 0; w < 2; ++w) {
    v1::WorkerProgress* p = st.mutable_nodes(w)->mutable_worker();
    p->set_bad_lines(4);
    for (int i = 0; i < 4; ++i) {
      p->add_bad_line_examples("w" + std::to_string(w) + ".csv:" + std::to_string(i) + ": bad");
    }
  }
  st.mutable_nodes(1)->mutable_worker()->set_data_exhausted(true);
  // A byte that is not UTF-8 still gives valid JSON.
  st.mutable_nodes(0)->mutable_worker()->set_bad_line_examples(0, "w0.csv:0: \xff\x01");
  const DataNotes notes = CollectDataNotes(st);
  EXPECT_EQ(notes.bad_lines, 8);
  EXPECT_EQ(notes.bad_line_examples.size(), 5u);
  EXPECT_EQ(notes.bad_line_examples[4], "w1.csv:0: bad");
  EXPECT_EQ(notes.exhausted, std::vector<int>{1});
  const Json r = Json::parse(ReportJson(Facts(), DrilledRun(), st));
  EXPECT_EQ(r["bad_lines"], 8);
  EXPECT_EQ(r["data_exhausted"], true);
  EXPECT_EQ(r["bad_line_examples"].size(), 5u);
  EXPECT_EQ(r["bad_line_examples"][0], "w0.csv:0: \xef\xbf\xbd\x01");

  EXPECT_EQ(BadLinesSummary(Facts(), notes).rfind(
                "ecps: skipped 8 malformed input lines (data.max_bad_lines 10); the first:\n"
                "  w0.csv:0: ",
                0),
            0u);
  EXPECT_EQ(BadLinesSummary(Facts(), DataNotes()), "");
  EXPECT_THAT(FinishedSummary(Facts(), st, "runs/q"),
              HasSubstr("; data ran out at step 100 of 100 (1600 of the 1600 samples asked)"));
}

TEST(RunReportTest, FailureSummaryGivesDetectionRebuildAndThroughput) {
  EXPECT_EQ(FailureSummary(DrilledRun(), Finished()),
            "ecps: server 1 failed at 20.0 s: detected in 1.5 s, rebuilt in 8.5 s (900 rows, 40 "
            "on demand, 12.5 MB/s); throughput during recovery 0.50x of before (50 vs 100 "
            "samples/s)\n");
  v1::StatusResponse st = Finished();
  st.mutable_failures(0)->set_state(v1::FAILURE_REPLACING);
  st.mutable_failures(0)->set_recovered_unix_ms(0);
  EXPECT_EQ(FailureSummary(DrilledRun(), st),
            "ecps: server 1 failed at 20.0 s: detected in 1.5 s; not recovered\n");
  EXPECT_EQ(FailureSummary(DrilledRun(), v1::StatusResponse()), "");
}

TEST(RunReportTest, FinishedSummaryNamesScrubCheckpointAndReport) {
  v1::StatusResponse st = Finished();
  st.mutable_checkpoint()->set_done(true);
  st.mutable_checkpoint()->set_final(true);
  st.mutable_checkpoint()->set_step(100);
  st.mutable_checkpoint()->set_dir("runs/q/checkpoints/step-100");
  EXPECT_EQ(FinishedSummary(Facts(), st, "runs/q"),
            "ecps: finished 100 steps, 1600 samples in 40.0 s (40 samples/s); AUC 0.7123, "
            "logloss 0.4568\n"
            "ecps: scrub clean: 48 stripes and 3 dense replicas checked in 0.25 s\n"
            "ecps: final checkpoint of step 100 saved to runs/q/checkpoints/step-100\n"
            "ecps: report runs/q/report.json, metrics runs/q/metrics.csv\n");
  st.mutable_scrub()->set_clean(false);
  st.clear_checkpoint();
  const std::string text = FinishedSummary(Facts(), st, "runs/q");
  EXPECT_THAT(text, HasSubstr("ecps: scrub NOT CLEAN"));
  EXPECT_THAT(text, Not(HasSubstr("checkpoint")));
}

// The online scrub's counts are summed over the servers' heartbeats, in the report and, when
// it found a corruption, in the summary.
TEST(RunReportTest, OnlineScrubCountsAreSummedOverTheServers) {
  v1::StatusResponse st = Finished();
  for (int id : {0, 1}) {
    v1::NodeInfo* n = st.add_nodes();
    n->set_role(v1::ROLE_SERVER);
    n->set_id(id);
    v1::ServerStats* s = n->mutable_server();
    s->set_scrub_passes(3);
    s->set_scrub_stripes_checked(100);
    s->set_scrub_mismatches_found(id + 1);
    s->set_scrub_mismatches_confirmed(id);
    s->set_scrub_repaired(id);
  }
  const Json r = Json::parse(ReportJson(Facts(), DrilledRun(), st));
  EXPECT_EQ(r["online_scrub"]["passes"], 6);
  EXPECT_EQ(r["online_scrub"]["stripes_checked"], 200);
  EXPECT_EQ(r["online_scrub"]["mismatches_found"], 3);
  EXPECT_EQ(r["online_scrub"]["mismatches_confirmed"], 1);
  EXPECT_EQ(r["online_scrub"]["repaired"], 1);
  EXPECT_EQ(r["online_scrub"]["unlocated"], 0);
  EXPECT_THAT(FinishedSummary(Facts(), st, "runs/q"),
              HasSubstr("ecps: online scrub found 1 corrupt stripes or dense replicas: 1 "
                        "repaired, 0 not locatable"));
  EXPECT_THAT(FinishedSummary(Facts(), Finished(), "runs/q"), Not(HasSubstr("online scrub")));
}

// A server replaced during the job took its scrub counts with it from the status's nodes; the
// coordinator keeps them (replaced_servers_scrub), and the report counts them with the rest.
TEST(RunReportTest, OnlineScrubCountsKeepTheReplacedServers) {
  v1::StatusResponse st = Finished();
  v1::NodeInfo* n = st.add_nodes();
  n->set_role(v1::ROLE_SERVER);
  n->set_id(0);
  n->mutable_server()->set_scrub_passes(2);
  n->mutable_server()->set_scrub_mismatches_confirmed(1);
  n->mutable_server()->set_scrub_repaired(1);
  v1::ServerStats* replaced = st.mutable_replaced_servers_scrub();
  replaced->set_scrub_passes(4);
  replaced->set_scrub_bytes_checked(1000);
  replaced->set_scrub_mismatches_confirmed(3);
  replaced->set_scrub_repaired(2);
  replaced->set_scrub_unlocated(1);
  const Json r = Json::parse(ReportJson(Facts(), DrilledRun(), st));
  EXPECT_EQ(r["online_scrub"]["passes"], 6);
  EXPECT_EQ(r["online_scrub"]["bytes_checked"], 1000);
  EXPECT_EQ(r["online_scrub"]["mismatches_confirmed"], 4);
  EXPECT_EQ(r["online_scrub"]["repaired"], 3);
  EXPECT_EQ(r["online_scrub"]["unlocated"], 1);
  EXPECT_THAT(FinishedSummary(Facts(), st, "runs/q"),
              HasSubstr("ecps: online scrub found 4 corrupt stripes or dense replicas: 3 "
                        "repaired, 1 not locatable"));
}

// The report lists every counter of the table (runtime/scrub_counters.h), in its order: the
// keys scripts grep for stay as they were.
TEST(RunReportTest, OnlineScrubListsEveryCounter) {
  const auto r = nlohmann::ordered_json::parse(ReportJson(Facts(), DrilledRun(), Finished()));
  std::vector<std::string> keys;
  for (const auto& [key, value] : r["online_scrub"].items()) keys.push_back(key);
  EXPECT_THAT(keys, ElementsAre("passes", "stripes_checked", "bytes_checked", "dense_checked",
                                "mismatches_found", "mismatches_confirmed", "repaired",
                                "unlocated"));
}

TEST(RunReportTest, FactsComeFromTheSpec) {
  JobSpec spec;
  spec.job.name = "j";
  spec.job.steps = 100;
  spec.data.batch_size = 8;
  spec.cluster.workers = 2;
  spec.cluster.servers = 3;
  spec.fault_tolerance.mode = FaultToleranceMode::kReplication;
  spec.data.max_bad_lines = 7;
  const JobFacts f = FactsOf(spec);
  EXPECT_EQ(f.samples_asked, 1600);
  EXPECT_EQ(f.steps_asked, 100);
  EXPECT_EQ(f.servers, 3);
  EXPECT_EQ(f.mode, "replication");
  EXPECT_EQ(f.max_bad_lines, 7);
}

}  // namespace
}  // namespace ecps

#include "cli/progress_line.h"

#include <algorithm>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ecps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::StatusResponse Running() {
  v1::StatusResponse st;
  st.set_phase(v1::JOB_RUNNING);
  st.set_step(120);
  st.set_total_steps(1000);
  st.set_samples_per_s(4210.4);
  st.set_loss(0.45213);
  st.set_eval_auc(0.71234);
  st.set_epoch(3);
  st.set_elapsed_s(62);
  st.set_eta_s(495);
  return st;
}

v1::NodeInfo* AddNode(v1::StatusResponse* st, v1::Role role, int id, v1::NodeState state) {
  v1::NodeInfo* n = st->add_nodes();
  n->set_role(role);
  n->set_id(id);
  n->set_state(state);
  return n;
}

TEST(ProgressLineTest, PhaseStepRateLossAucEpochAndTimes) {
  EXPECT_EQ(ProgressLine(Running()),
            "[running] step 120/1000 (12%) | 4210 samples/s | loss 0.4521 | AUC 0.7123 | "
            "map epoch 3 | elapsed 1m02s | ETA 8m15s");
}

TEST(ProgressLineTest, DataEpochOfSeveralAfterTheSteps) {
  v1::StatusResponse st = Running();
  st.set_data_epochs(3);
  EXPECT_THAT(ProgressLine(st), ::testing::StartsWith("[running] step 120/1000 (12%) | "
                                                      "epoch -/3 | 4210 samples/s"));
  st.set_data_epoch(2);
  EXPECT_THAT(ProgressLine(st), ::testing::StartsWith("[running] step 120/1000 (12%) | "
                                                      "epoch 2/3 | 4210 samples/s"));
  st.set_data_epochs(1);  // one pass: nothing to count
  EXPECT_THAT(ProgressLine(st), ::testing::StartsWith("[running] step 120/1000 (12%) | 4210"));
}

TEST(ProgressLineTest, UnknownAucAndEtaAndNoTotal) {
  v1::StatusResponse st = Running();
  st.set_phase(v1::JOB_STARTING);
  st.set_eval_auc(-1);
  st.set_eta_s(-1);
  st.set_total_steps(0);
  EXPECT_EQ(ProgressLine(st),
            "[starting] step 120/0 (0%) | 4210 samples/s | loss 0.4521 | AUC -- | "
            "map epoch 3 | elapsed 1m02s | ETA --");
}

TEST(ProgressLineTest, NotesForRecoveringDeadAndSuspectNodes) {
  v1::StatusResponse st = Running();
  st.set_phase(v1::JOB_RECOVERING);
  v1::NodeInfo* rebuilding = AddNode(&st, v1::ROLE_SERVER, 2, v1::NODE_RECOVERING);
  rebuilding->mutable_server()->set_rebuild_rows_total(1000);
  rebuilding->mutable_server()->set_rebuild_rows_done(450);
  rebuilding->mutable_server()->set_on_demand_rebuilds(120);
  AddNode(&st, v1::ROLE_SERVER, 3, v1::NODE_RECOVERING);  // no rows counted yet
  AddNode(&st, v1::ROLE_WORKER, 1, v1::NODE_DEAD);
  AddNode(&st, v1::ROLE_SERVER, 0, v1::NODE_SUSPECT);
  AddNode(&st, v1::ROLE_SERVER, 1, v1::NODE_ACTIVE);
  AddNode(&st, v1::ROLE_SERVER, -1, v1::NODE_DEAD);  // a spare: no slot to name
  const std::string line = ProgressLine(st);
  EXPECT_EQ(line.substr(line.find(" | recovering")),
            " | recovering server 2: 45% rebuilt, 120 on demand | recovering server 3"
            " | worker 1 dead: replacing | server 0 suspect");
  EXPECT_EQ(line.rfind("[recovering] step 120/1000", 0), 0u);
}

TEST(FormatDurationTest, SecondsMinutesHoursAndUnknown) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(44.6), "45s");
  EXPECT_EQ(FormatDuration(125), "2m05s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "--");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "--");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::quiet_NaN()), "--");
}

TEST(FailureHistoryEventsTest, OneLinePerChangeOfState) {
  v1::StatusResponse st;
  v1::FailureEvent* e = st.add_failures();
  e->set_role(v1::ROLE_SERVER);
  e->set_id(1);
  e->set_pid(4242);
  e->set_reason("no heartbeat for 1.5 s");
  e->set_detection_s(1.5);
  e->set_state(v1::FAILURE_DETECTED);
  std::map<int, int> seen;
  EXPECT_THAT(FailureHistoryEvents(st, &seen),
              ElementsAre("server 1 (pid 4242) declared dead: no heartbeat for 1.5 s; "
                          "detected in 1.5 s"));
  EXPECT_THAT(FailureHistoryEvents(st, &seen), IsEmpty());  // nothing new

  e->set_state(v1::FAILURE_REPLACING);
  e->set_replacement_pid(4300);
  EXPECT_THAT(FailureHistoryEvents(st, &seen),
              ElementsAre("server 1 replaced by a new process (pid 4300); rebuilding online"));

  e->set_state(v1::FAILURE_RECOVERED);
  e->set_rebuild_s(2.3);
  e->set_rows_rebuilt(900);
  e->set_on_demand_rebuilds(40);
  EXPECT_THAT(FailureHistoryEvents(st, &seen),
              ElementsAre("server 1 recovered in 2.3 s after replacement (900 rows rebuilt: 40 "
                          "on demand)"));

  // A failure seen first when it is already over: all three lines at once.
  std::map<int, int> late;
  e->set_role(v1::ROLE_WORKER);
  e->set_by_spare(false);
  EXPECT_THAT(FailureHistoryEvents(st, &late),
              ElementsAre("worker 1 (pid 4242) declared dead: no heartbeat for 1.5 s; "
                          "detected in 1.5 s",
                          "worker 1 replaced by a new process (pid 4300)",
                          "worker 1 recovered in 2.3 s after replacement"));
}

TEST(MetricsCsvRowTest, ColumnsActiveServersAndEventsWithoutCommas) {
  v1::StatusResponse st = Running();
  st.set_samples(96000);
  st.set_eval_logloss(0.5);
  AddNode(&st, v1::ROLE_SERVER, 0, v1::NODE_ACTIVE);
  AddNode(&st, v1::ROLE_SERVER, 1, v1::NODE_DEAD);
  AddNode(&st, v1::ROLE_SERVER, 2, v1::NODE_ACTIVE);
  AddNode(&st, v1::ROLE_WORKER, 0, v1::NODE_ACTIVE);
  EXPECT_EQ(MetricsCsvRow(12.3456, st, "server-1 exited (signal 9, Killed); drill"),
            "12.346,running,3,120,96000,4210.4,0.452130,0.712340,0.500000,2,"
            "server-1 exited (signal 9  Killed); drill\n");
  // As many columns as the header names.
  const std::string header = kMetricsCsvHeader;
  const std::string row = MetricsCsvRow(0, st, "");
  EXPECT_EQ(std::count(header.begin(), header.end(), ','), std::count(row.begin(), row.end(), ','));
}

}  // namespace
}  // namespace ecps

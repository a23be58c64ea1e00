#include "coordinator/job_phase.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ecps {
namespace {

// Facts named by letters, so that a table row reads as one line: A all servers active,
// G every worker registered, R a server recovering, D every worker done, C a final
// checkpoint wanted, S a final scrub wanted.
PhaseFacts Facts(v1::JobPhase phase, const std::string& flags) {
  PhaseFacts f;
  f.phase = phase;
  for (char c : flags) {
    switch (c) {
      case 'A': f.all_servers_active = true; break;
      case 'G': f.all_workers_registered = true; break;
      case 'R': f.any_server_recovering = true; break;
      case 'D': f.all_workers_done = true; break;
      case 'C': f.final_checkpoint_wanted = true; break;
      case 'S': f.final_scrub_wanted = true; break;
      default: ADD_FAILURE() << "unknown fact " << c;
    }
  }
  return f;
}

struct Row {
  v1::JobPhase from;
  std::string facts;
  v1::JobPhase to;
  bool save = false;
  bool scrub = false;
};

TEST(JobPhaseTest, Transitions) {
  const std::vector<Row> table = {
      // Starting waits for every server and every worker.
      {v1::JOB_STARTING, "", v1::JOB_STARTING},
      {v1::JOB_STARTING, "A", v1::JOB_STARTING},
      {v1::JOB_STARTING, "G", v1::JOB_STARTING},
      {v1::JOB_STARTING, "R", v1::JOB_STARTING},
      {v1::JOB_STARTING, "AG", v1::JOB_RUNNING},
      // ... and may finish in the same decision when the workers are already done.
      {v1::JOB_STARTING, "AGD", v1::JOB_FINISHED},
      {v1::JOB_STARTING, "AGDC", v1::JOB_RUNNING, true, false},
      // Recovery comes and goes with the servers.
      {v1::JOB_RUNNING, "AG", v1::JOB_RUNNING},
      {v1::JOB_RUNNING, "GR", v1::JOB_RECOVERING},
      {v1::JOB_RECOVERING, "GR", v1::JOB_RECOVERING},
      {v1::JOB_RECOVERING, "AG", v1::JOB_RUNNING},
      // The end: the final checkpoint first, then the scrub, then FINISHED.
      {v1::JOB_RUNNING, "AGD", v1::JOB_FINISHED},
      {v1::JOB_RUNNING, "AGDC", v1::JOB_RUNNING, true, false},
      {v1::JOB_RUNNING, "AGDCS", v1::JOB_RUNNING, true, false},
      {v1::JOB_RUNNING, "AGDS", v1::JOB_RUNNING, false, true},
      // A recovering job waits to finish, but asks for the final steps at once.
      {v1::JOB_RECOVERING, "GRD", v1::JOB_RECOVERING},
      {v1::JOB_RUNNING, "GRD", v1::JOB_RECOVERING},
      {v1::JOB_RECOVERING, "GRDC", v1::JOB_RECOVERING, true, false},
      {v1::JOB_RECOVERING, "GRDS", v1::JOB_RECOVERING, false, true},
      {v1::JOB_RECOVERING, "AGD", v1::JOB_FINISHED},
      // Final phases stay.
      {v1::JOB_FINISHED, "GR", v1::JOB_FINISHED},
      {v1::JOB_FINISHED, "AGDCS", v1::JOB_FINISHED},
      {v1::JOB_FAILED, "AG", v1::JOB_FAILED},
      {v1::JOB_FAILED, "AGD", v1::JOB_FAILED},
  };
  for (const Row& row : table) {
    const PhaseDecision next = NextPhase(Facts(row.from, row.facts));
    const std::string name = v1::JobPhase_Name(row.from) + " with '" + row.facts + "'";
    EXPECT_EQ(next.phase, row.to) << name << " went to " << v1::JobPhase_Name(next.phase);
    EXPECT_EQ(next.save_final_checkpoint, row.save) << name;
    EXPECT_EQ(next.run_final_scrub, row.scrub) << name;
  }
}

}  // namespace
}  // namespace ecps

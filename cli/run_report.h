// The end of `ecps run`: report.json and the summary it prints, both pure functions of the
// coordinator's last status and what the launcher saw of the run (RunRecord), so that a test
// can build either from a hand-made v1::StatusResponse.
#ifndef ECPS_CLI_RUN_REPORT_H_
#define ECPS_CLI_RUN_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cli/timeline.h"
#include "proto/ecps.pb.h"
#include "runtime/spec.h"

namespace ecps {

// The job as its spec asked for it, which the report compares the run with.
struct JobFacts {
  std::string name;
  std::string mode;  // fault_tolerance.mode
  int servers = 0;
  int workers = 0;
  int64_t steps_asked = 0;
  int64_t samples_asked = 0;  // job.steps full batches from every worker
  int64_t max_bad_lines = 0;
};
JobFacts FactsOf(const JobSpec& spec);

// A fault drill the launcher injected: what, when (launcher seconds) and into which pid.
struct DrillRecord {
  FaultSpec fault;
  double t = 0;
  int64_t pid = 0;
};

// What the launcher saw of the run, besides the coordinator's last status.
struct RunRecord {
  bool have_status = false;  // the status passed along is the coordinator's last answer
  bool ok = false;           // the job finished
  std::string failure;       // why not, when it did not
  double wall_s = 0;         // the launcher's time from monitoring to the end
  double start_unix = 0;     // Unix time (s) of the launcher's time 0
  std::vector<TimelinePoint> timeline;
  std::vector<DrillRecord> drills;
  // Each death of the coordinator (a new one took the job over, docs/recovery.md).
  struct CoordinatorFailure {
    double t = 0;           // when the launcher saw it die
    double downtime_s = -1;  // until the new one answered (-1: it never did)
    int64_t pid = 0;
    int64_t step_at_death = 0;  // the job's step in the last status before it
    // The step in the new one's first status (from its saved state, up to a second old) and
    // in its first status after that with another step (the workers' fresh reports); -1
    // until then.
    int64_t step_restored = -1;
    int64_t step_at_restart = -1;
  };
  std::vector<CoordinatorFailure> coordinator_failures;
};

// What the workers' readers saw, from their last progress reports (a finished worker's
// report stays in the coordinator's map).
struct DataNotes {
  int64_t bad_lines = 0;
  std::vector<std::string> bad_line_examples;  // the first five over the workers, in id order
  std::vector<int> exhausted;                  // workers whose partition ran out
};
DataNotes CollectDataNotes(const v1::StatusResponse& status);

// report.json: the job, its outcome, throughput, evaluation, scrub, the drills, each failure
// with its detection, rebuild and throughput figures (null where unknown), and the final
// status (null without one). One key per line, each value on its key's line except the
// items of a list, one per line: scripts and tests grep it.
std::string ReportJson(const JobFacts& job, const RunRecord& run, const v1::StatusResponse& last);

// One line per failure of the job: when it failed, detection, rebuild or resume, and the
// throughput during recovery against before it. Empty without failures.
std::string FailureSummary(const RunRecord& run, const v1::StatusResponse& last);

// The lines after a job that finished: steps, samples, rate, evaluation (and that the data
// ran out, when it did), the skipped input lines, the scrub, the checkpoint, where the report
// is (`out_dir`).
std::string FinishedSummary(const JobFacts& job, const v1::StatusResponse& last,
                            const std::string& out_dir);

// "ecps: skipped N malformed input lines ...; the first:" and those lines; empty for none.
std::string BadLinesSummary(const JobFacts& job, const DataNotes& notes);

}  // namespace ecps

#endif  // ECPS_CLI_RUN_REPORT_H_

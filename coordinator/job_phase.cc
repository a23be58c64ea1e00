#include "coordinator/job_phase.h"

namespace ecps {

PhaseDecision NextPhase(const PhaseFacts& facts) {
  PhaseDecision next;
  next.phase = facts.phase;
  if (next.phase == v1::JOB_FINISHED || next.phase == v1::JOB_FAILED) return next;
  // The steps run in order on the same facts: a job whose last server registers after every
  // worker finished (a restarted coordinator) may go from STARTING to done in one decision.
  if (next.phase == v1::JOB_STARTING && facts.all_servers_active &&
      facts.all_workers_registered) {
    next.phase = v1::JOB_RUNNING;
  }
  if (next.phase != v1::JOB_RUNNING && next.phase != v1::JOB_RECOVERING) return next;
  next.phase = facts.any_server_recovering ? v1::JOB_RECOVERING : v1::JOB_RUNNING;
  if (!facts.all_workers_done) return next;
  // The final save waits for no server to recover (RunPendingCheckpoint checks), but is
  // asked for at once so that it starts the moment the replacement is ACTIVE.
  if (facts.final_checkpoint_wanted) {
    next.save_final_checkpoint = true;
    return next;
  }
  if (facts.final_scrub_wanted) {
    next.run_final_scrub = true;
    return next;
  }
  if (next.phase == v1::JOB_RECOVERING) return next;  // finishes once every server is active
  next.phase = v1::JOB_FINISHED;
  return next;
}

}  // namespace ecps

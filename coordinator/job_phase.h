// The job phase as a pure transition function of what the coordinator knows (the phase
// machine of coordinator_service.h): MembershipManager gathers the facts under its lock and
// applies the decision, so every transition is table-tested here without a cluster or clock.
//
//   STARTING   -> RUNNING     every server slot ACTIVE and every worker registered
//   RUNNING   <-> RECOVERING  while some server slot is recovering (or dead, awaiting one)
//   RUNNING    -> FINISHED    every worker done, once the final checkpoint (when wanted) and
//                             the final scrub (when wanted) are done and nothing recovers
// A final checkpoint or scrub that is still wanted when every worker is done keeps the phase
// and asks for it instead (the Run* methods do it outside the lock, then ask again). FAILED
// is never decided here: failures come from events (a worker's error, a lost stripe, a
// timeout), not from state. FINISHED and FAILED are final.
#ifndef ECPS_COORDINATOR_JOB_PHASE_H_
#define ECPS_COORDINATOR_JOB_PHASE_H_

#include "proto/ecps.pb.h"

namespace ecps {

struct PhaseFacts {
  v1::JobPhase phase = v1::JOB_STARTING;
  bool all_servers_active = false;
  bool all_workers_registered = false;
  bool any_server_recovering = false;
  bool all_workers_done = false;
  // A final checkpoint is configured (a checkpointer and checkpoint.save_final) and not
  // saved yet.
  bool final_checkpoint_wanted = false;
  // A final scrub is configured (a scrubber, a mode with parity) and not run yet.
  bool final_scrub_wanted = false;
};

struct PhaseDecision {
  v1::JobPhase phase = v1::JOB_STARTING;
  // Every worker is done: save the final checkpoint now (RunPendingCheckpoint).
  bool save_final_checkpoint = false;
  // Every worker is done (and any final checkpoint saved): scrub now (RunPendingScrub).
  bool run_final_scrub = false;
};

PhaseDecision NextPhase(const PhaseFacts& facts);

}  // namespace ecps

#endif  // ECPS_COORDINATOR_JOB_PHASE_H_

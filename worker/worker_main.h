// The `ecps worker` role: trains its partition of the data against the parameter servers.
#ifndef ECPS_WORKER_WORKER_MAIN_H_
#define ECPS_WORKER_WORKER_MAIN_H_

#include <string>

#include "runtime/spec.h"

namespace ecps {

struct WorkerOptions {
  JobSpec spec;
  std::string coordinator;  // host:port
  // Empty, or the file the coordinator writes its address into: read again when the
  // coordinator stops answering (runtime/coordinator_finder.h).
  std::string coordinator_file;
  std::string token;  // its role token (runtime/security.h: PresentedToken)
  int id = 0;               // worker index: reads partition id of spec.cluster.workers
  // Where its gRPC health service (runtime/health.h) and /metrics listen; a worker serves
  // no other RPC.
  std::string listen_host = "127.0.0.1";
  int port = 0;             // 0: any free port
};

// Registers, waits for every server, then runs spec.job.steps training steps (read batch,
// dedupe ids, pull rows and dense tensors, forward, backward, push), prefetching the next
// batch's rows while this one computes (unless job.synchronous). Worker 0 also evaluates on
// the held-out split every job.eval_every steps and at the end. Progress travels in
// heartbeats. Returns the exit code: 0 when the job finished, 1 on an error.
int RunWorker(const WorkerOptions& options);

}  // namespace ecps

#endif  // ECPS_WORKER_WORKER_MAIN_H_

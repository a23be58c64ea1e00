// The steps of a training worker process's life, apart from the process itself (signals,
// exiting), so that each can be driven by a unit test against a fake coordinator: register,
// plan where training resumes, heartbeat, wait for the servers and train, pause and rewind
// for a mode-checkpoint rollback, and wait for the job to end. worker/worker_main.cc's
// RunWorker strings them together.
//
// Where training resumes is a pure function of plain inputs (PlanResume); so is the rewind
// after a rollback (PlanRollbackResume).
#ifndef ECPS_WORKER_WORKER_LIFECYCLE_H_
#define ECPS_WORKER_WORKER_LIFECYCLE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/abft.h"
#include "proto/ecps.pb.h"
#include "runtime/coordinator_grace.h"
#include "runtime/coordinator_link.h"
#include "worker/training_loop.h"
#include "worker/worker_main.h"

namespace ecps {

// Where a worker's training starts.
struct ResumePlan {
  enum class From {
    kStart,       // a fresh job: step 0, the partition's beginning
    kReplacement, // replacing a dead worker: after its last reported progress
    kCheckpoint,  // job.resume_from, saved by as many workers: each at its own position
    kCheckpointRepartitioned,  // job.resume_from, saved by another worker count: every
                               // partition from its beginning, at the checkpoint's step
  };
  From from = From::kStart;
  bool resume = false;   // whether TrainingLoop::ResumeAt(step, position) applies
  int64_t step = 0;      // the last step done: training continues at step + 1
  int64_t position = 0;  // the reader's position in this worker's partition
};

// What a checkpoint's manifest says about where its job stood.
struct CheckpointResumePoint {
  int64_t step = 0;                       // the slowest worker's step
  std::vector<int64_t> reader_positions;  // by worker id
};

struct ResumeInputs {
  v1::WorkerProgress registered;  // RegisterResponse.resume (a dead worker's last progress)
  // The checkpoint of job.resume_from, when set (and read only when not a replacement).
  std::optional<CheckpointResumePoint> checkpoint;
  int workers = 1;      // cluster.workers
  int worker_id = 0;
  int64_t batch_size = 1;
  // Whether a reader position counts whole batches (synthetic data), so that it gives the
  // worker's own step.
  bool positions_count_batches = false;
};

// Whether a registration's resume progress says this worker replaces a dead one.
bool IsReplacement(const v1::WorkerProgress& resume);

// A checkpoint records one step (the slowest worker's) but every worker's own reader
// position. Where a position counts whole batches, it gives this worker's own step, so a
// worker that was ahead does not train its extra batches twice; otherwise `step`.
int64_t OwnStep(int64_t step, int64_t position, int64_t batch_size,
                bool positions_count_batches);

// Where training starts: a replacement continues from the dead worker's progress (steps it
// did after that report are trained again: at-least-once); otherwise a job resuming from a
// checkpoint continues at its step, each worker at its saved position when the worker
// count is the checkpoint's; otherwise from the start.
ResumePlan PlanResume(const ResumeInputs& inputs);

// Where training continues after rolling back to `target` (a reader position of -1: the
// checkpoint had another worker count, so from the partition's beginning).
ResumePlan PlanRollbackResume(const v1::Rollback& target, int64_t batch_size,
                              bool positions_count_batches);

// Mode checkpoint rollbacks (HeartbeatResponse.rollback), between the heartbeat thread that
// hears of them and the training thread that pauses for them. Thread-safe.
class RollbackTracker {
 public:
  // Records a heartbeat's rollback (generation 0: none). A rollback already over (ready) at
  // this process's first response happened before it trained: it is handled at once, and
  // true is returned (the caller reports it resumed). A newer generation raises halt().
  bool Observe(const v1::Rollback& rollback, bool first_response);
  // Whether a rollback is wanted that the worker has not rewound for.
  bool pending() const { return wanted_.load() > handled_.load(); }
  uint64_t wanted() const { return wanted_.load(); }
  // While paused for `*generation`: moves it on to a later rollback that came meanwhile,
  // and once the latest rollback is `*generation` and ready, marks it handled, lowers
  // halt() and returns it.
  std::optional<v1::Rollback> TakeReady(uint64_t* generation);
  // Raised while the training loop must stop at its next step (and any RPC retry).
  std::atomic<bool>* halt() { return &halt_; }

 private:
  std::atomic<bool> halt_{false};
  std::atomic<uint64_t> wanted_{0};
  std::atomic<uint64_t> handled_{0};
  absl::Mutex mu_;
  v1::Rollback latest_ ABSL_GUARDED_BY(mu_);
};

// What the process must do after a heartbeat.
enum class WorkerHeartbeatAction {
  kContinue,
  kKill,  // `ecps kill`: die at once, as a crash would (SIGKILL)
  // No answer from the coordinator for cluster.coordinator_grace_s: stop is raised, the exit
  // code is 1, and the process says why (lost_message()).
  kCoordinatorLost,
};

class WorkerLifecycle {
 public:
  // `coordinator` and `stop` (raised on SIGTERM/SIGINT; this object raises it too when the
  // coordinator fences the worker or fails the job) must outlive this object.
  WorkerLifecycle(const WorkerOptions& options, std::string instance,
                  CoordinatorLink* coordinator, std::atomic<bool>* stop);

  // Registers as options.id, waiting up to cluster.connect_timeout_s for the coordinator.
  // The error names the coordinator.
  absl::StatusOr<v1::RegisterResponse> Register();

  // Plans where training starts from the registration (reading the manifest of
  // job.resume_from when the plan needs it) and shows the starting point on the board.
  // The error says why the checkpoint cannot be resumed from.
  absl::Status PlanStart(const v1::RegisterResponse& registered);

  // One heartbeat with the board's progress. Applies the response: records a rollback; a
  // fenced worker or a failed job sets exit code 1 and raises stop; a finished job sets 0.
  // A raised stop halts training (and, with no exit code yet, sets 1). A heartbeat that
  // fails changes nothing else (training goes on; the next one comes after
  // NextHeartbeatWait()) until nothing was heard for the grace (runtime/coordinator_grace.h).
  // `now` is for tests.
  WorkerHeartbeatAction Heartbeat(
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  std::chrono::milliseconds NextHeartbeatWait() const { return grace_.NextWait(); }
  const std::string& lost_message() const { return lost_message_; }

  // Waits for every server to serve, then trains job.steps steps from plan(), pausing for
  // and rewinding after every rollback. Needs real parameter servers.
  absl::Status Train();

  // Paused for rollback `generation`: waits until every server has reloaded the checkpoint
  // (moving on to any later rollback), then plans the rewind. CANCELLED when stopped.
  absl::Status AwaitRollback(uint64_t generation);

  // Reports how training ended on the board and waits up to `wait_ms` for the coordinator
  // to end the job; with no exit code by then, sets 0 (trained) or 1.
  void Finish(const absl::Status& trained, int wait_ms = 60000);

  // Whether heartbeats carry on: no exit code decided.
  bool heartbeating() const { return exit_code_.load() < 0; }
  int exit_code() const { return exit_code_.load(); }
  const ResumePlan& plan() const { return plan_; }
  ProgressBoard* board() { return &board_; }
  RollbackTracker* rollbacks() { return &rollbacks_; }
  const std::string& sender() const { return sender_; }

 private:
  // The GEMM faults a test asked of this process (ECPS_GEMM_FAULTS, honoured only with
  // ECPS_FAULT_INJECTION=1; kernels/abft.h ParseGemmFaults); null when none.
  absl::StatusOr<std::unique_ptr<GemmFaultInjector>> GemmFaultsFromEnvironment() const;

  const WorkerOptions& options_;
  const std::string sender_;
  const std::string instance_;
  CoordinatorLink* const coordinator_;
  std::atomic<bool>* const stop_;
  ProgressBoard board_;
  RollbackTracker rollbacks_;
  ResumePlan plan_;  // the training thread's (set before heartbeats start)
  std::atomic<int> exit_code_{-1};
  std::atomic<bool> finished_training_{false};
  bool first_response_ = true;  // the heartbeat thread's
  CoordinatorGrace grace_;       // the heartbeat thread's
  std::string lost_message_;     // the heartbeat thread's
};

}  // namespace ecps

#endif  // ECPS_WORKER_WORKER_LIFECYCLE_H_

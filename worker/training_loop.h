// One worker's training loop against the parameter servers, apart from process concerns
// (registration, heartbeats, signals live in worker_main.cc), so tests can drive it.
//
// Each step: read a batch, dedupe its ids, pull its rows and the dense tensors, forward,
// backward, push row and dense gradients. With job.synchronous these happen one after
// another; otherwise a step's push and the pulls for the step after it run in the
// background while the next step computes. Those pulls miss the previous step's update,
// which the worker then applies itself (worker/pipeline_replay.h): a step misses nothing of
// its own worker's updates, only other workers'. Not thread-safe.
#ifndef ECPS_WORKER_TRAINING_LOOP_H_
#define ECPS_WORKER_TRAINING_LOOP_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/dlrm.h"
#include "kernels/optimizers.h"
#include "domain/spec_config.h"
#include "proto/ecps.pb.h"
#include "runtime/clock.h"
#include "runtime/spec.h"
#include "kernels/cpu_dense_math.h"
#include "worker/data.h"
#include "worker/pipeline_replay.h"
#include "worker/ps_client.h"
#include "worker/step.h"

namespace ecps {

// A batch with its unique ids and their pulled rows.
struct PreparedBatch {
  Batch batch;
  UniqueIds ids;
  std::vector<std::vector<float>> rows;
  bool valid = false;  // false at the end of the partition
  int64_t end_position = 0;  // the reader's position just after this batch
  int64_t epoch = 0;         // the pass over the data its last sample is from, 0-based
  // Pipelined: the rows the batch before it updates, pulled whole to replay that update.
  SharedRows shared;
};

// Progress shared between the training loop and the heartbeat thread. Thread-safe.
class ProgressBoard {
 public:
  // `clock` (runtime/clock.h; it must outlive the board) is injected so that tests can move
  // time by hand; by default the steady clock, since only differences are read.
  explicit ProgressBoard(const Clock* clock = DefaultClock())
      : clock_(clock), last_time_(clock_->Now()), counted_at_(last_time_) {}

  void Step(int64_t step, int64_t samples, double loss, int64_t position, int64_t bad) {
    absl::MutexLock lock(&mu_);
    if (samples != p_.samples()) counted_at_ = clock_->Now();
    p_.set_step(step);
    p_.set_samples(samples);
    p_.set_reader_position(position);
    p_.set_bad_lines(bad);
    loss_sum_ += loss;
    ++loss_count_;
  }
  // `n` more steps were computed again after a failed GEMM checksum (worker.abft).
  void AbftDetections(int64_t n) {
    absl::MutexLock lock(&mu_);
    p_.set_abft_detections(p_.abft_detections() + n);
  }
  // This worker computes wrongly (`why`): the coordinator declares it dead and replaces it.
  void Unhealthy(const std::string& why) {
    absl::MutexLock lock(&mu_);
    p_.set_unhealthy(why);
  }
  // The pass over the data (1-based) that the last sample trained is from, of `epochs`.
  void DataEpoch(int epoch, int epochs) {
    absl::MutexLock lock(&mu_);
    p_.set_data_epoch(epoch);
    p_.set_data_epochs(epochs);
  }
  void Eval(int64_t step, double auc, double logloss) {
    absl::MutexLock lock(&mu_);
    p_.set_eval_step(step);
    p_.set_eval_auc(auc);
    p_.set_eval_logloss(logloss);
  }
  // What the reader saw: the malformed lines it skipped (the first few as "file:line:
  // reason") and whether the partition ran out before job.steps.
  void Data(int64_t bad, const std::vector<std::string>& examples, bool exhausted) {
    absl::MutexLock lock(&mu_);
    p_.set_bad_lines(bad);
    p_.clear_bad_line_examples();
    for (const std::string& e : examples) p_.add_bad_line_examples(e);
    p_.set_data_exhausted(exhausted);
  }
  // Training starts (or resumes) from the count on the board now: the time before it
  // (start-up, waiting for the servers) must not count as a step that trained slowly.
  void TrainingStarts() {
    absl::MutexLock lock(&mu_);
    counted_at_ = clock_->Now();
  }
  void Done() {
    absl::MutexLock lock(&mu_);
    p_.set_done(true);
  }
  // Mode checkpoint rollback: stopped for rollback `generation`; then rewound to a checkpoint.
  void Paused(uint64_t generation) {
    absl::MutexLock lock(&mu_);
    p_.set_paused_generation(generation);
  }
  void Rewind(uint64_t generation, int64_t step, int64_t position) {
    absl::MutexLock lock(&mu_);
    p_.set_step(step);
    p_.set_samples(position);
    p_.set_reader_position(position);
    p_.set_resumed_generation(generation);
    counted_at_ = clock_->Now();
  }
  // A worker started after rollback `generation` was over: nothing of it to rewind.
  void Resumed(uint64_t generation) {
    absl::MutexLock lock(&mu_);
    p_.set_resumed_generation(generation);
  }
  void Fail(const std::string& error) {
    absl::MutexLock lock(&mu_);
    p_.set_error(error);
  }
  // The progress as the last snapshot left it, changing nothing (a /metrics scrape must not
  // move the heartbeats' rate window).
  v1::WorkerProgress Peek() {
    absl::MutexLock lock(&mu_);
    return p_;
  }
  // A snapshot for a heartbeat: rate and loss over the time since the previous snapshot,
  // and how long ago the count was reached (samples_age_s), which is what the coordinator
  // takes its rates from.
  v1::WorkerProgress Snapshot() {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    const double dt = absl::ToDoubleSeconds(now - last_time_);
    if (dt > 0 && p_.samples() >= last_samples_) {
      p_.set_samples_per_s((p_.samples() - last_samples_) / dt);
    }
    p_.set_samples_age_s(absl::ToDoubleSeconds(now - counted_at_));
    if (loss_count_ > 0) p_.set_loss(loss_sum_ / loss_count_);
    last_time_ = now;
    last_samples_ = p_.samples();
    loss_sum_ = 0;
    loss_count_ = 0;
    return p_;
  }

 private:
  absl::Mutex mu_;
  v1::WorkerProgress p_ ABSL_GUARDED_BY(mu_) = [] {
    v1::WorkerProgress p;
    p.set_eval_auc(-1);
    return p;
  }();
  double loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t loss_count_ ABSL_GUARDED_BY(mu_) = 0;
  static const Clock* DefaultClock() {
    static const MonotonicClock* const kSteady = new MonotonicClock;
    return kSteady;
  }

  const Clock* const clock_;
  absl::Time last_time_ ABSL_GUARDED_BY(mu_);
  // When p_.samples() was reached.
  absl::Time counted_at_ ABSL_GUARDED_BY(mu_);
  int64_t last_samples_ ABSL_GUARDED_BY(mu_) = 0;
};

class TrainingLoop {
 public:
  // `spec` is the job; `worker` this worker's index (its data partition; worker 0 also
  // evaluates). `stop` ends training early (CANCELLED) when set. All must outlive the loop.
  TrainingLoop(const JobSpec& spec, int worker, PsClient* ps, Dlrm* model, ProgressBoard* board,
               const std::atomic<bool>* stop)
      : spec_(spec), worker_(worker), ps_(ps), model_(model), board_(board), stop_(stop),
        sparse_optimizer_(ToSparseOptimizerConfig(spec.optimizer.sparse)),
        dense_optimizer_(ToDenseOptimizerConfig(spec.optimizer.dense)),
        cpu_math_(model), math_(&cpu_math_) {}

  // Trains with `math` (the CUDA DenseMath of cluster.worker_device: cuda) instead of the CPU
  // one; `model` still names the tensors. Call before Train(); `math` must outlive the loop.
  void UseDenseMath(DenseMath* math) { math_ = math; }

  // Continues a dead worker's partition: the next step is `step` + 1 and the data source
  // starts at `reader_position` (the last progress the dead worker reported). Call before
  // Train().
  void ResumeAt(int64_t step, int64_t reader_position) {
    start_step_ = step;
    start_position_ = reader_position;
  }

  // Runs job.steps steps (fewer when the partition ends: then a warning, and the board's
  // data_exhausted), then worker 0 evaluates. Returns the first error of a data source or a
  // server; INVALID_ARGUMENT when the partition held no sample to train (empty, or every
  // line malformed), which would otherwise end as a job that succeeded having trained nothing.
  absl::Status Train();

 private:
  struct StepGrads {
    std::vector<std::vector<float>> rows;   // per table, the summed gradients of its ids
    std::vector<std::vector<float>> dense;  // per dense tensor
  };
  // job.synchronous: read, pull, compute, push, one after another.
  absl::Status TrainInLockstep();
  // Otherwise: the push of a step and the pulls for the next overlap the computation.
  absl::Status TrainPipelined();
  // TrainPipelined's state (training_loop.cc) and steps: the first step's batch and dense
  // values, and the first background task; the background task of `step` (its push, the
  // pulls of step + 2, a read ahead; `held`: the dense versions the servers hold after its
  // push); the wait for the task, which reports the step it pushed (a no-op when no task
  // runs).
  struct Pipeline;
  absl::Status StartPipeline(Pipeline* p);
  void LaunchPush(Pipeline* p, int64_t step, std::vector<int64_t> held);
  absl::Status FinishPush(Pipeline* p);
  // Pipelined: Read, then hints the batch's rows to recovering servers.
  absl::Status ReadAhead(PreparedBatch* p);
  // Pipelined: pulls the dense tensors with their state and versions (`held`: see
  // PsClient::PullDense).
  absl::Status PullDenseInto(PulledDense* d, const std::vector<int64_t>* held = nullptr);
  // Whether worker 0 evaluates after `step` (job.eval_every, not the last step).
  bool EvaluatesAfter(int64_t step) const;
  // Reads the next batch and dedupes its ids.
  absl::Status Read(PreparedBatch* p);
  // Read, then pulls the rows.
  absl::Status Prepare(PreparedBatch* p);
  // Pipelined: Read, then pulls the rows, those `previous` also has whole (with their
  // optimizer state), for CatchUp to replay the update of `previous`'s step on them.
  absl::Status PrepareAfter(const PreparedBatch& previous, PreparedBatch* p);
  absl::Status PullAfter(const PreparedBatch& previous, PreparedBatch* p);
  // Pipelined: applies a step's update (`grads`) to what the next step pulled before that
  // step's push: its shared rows (into next->rows) and the dense tensors.
  absl::Status CatchUp(const StepGrads& grads, PreparedBatch* next, PulledDense* dense) const;
  // Forward and backward on `p` with dense parameters `dense`; returns the loss.
  // INVALID_ARGUMENT naming the step when the loss or a dense gradient is not finite (the
  // model diverged): nothing of that step is pushed. Row gradients are checked by the
  // servers, which refuse non-finite ones.
  static absl::Status CheckFinite(int64_t step, float loss, const StepGrads& grads);
  // INTERNAL naming the step when the dense math fails (a GPU error); kUnhealthyWorker when
  // its GEMM checks failed too often (CountDetections).
  absl::StatusOr<float> Compute(int64_t step, const PreparedBatch& p,
                                const std::vector<std::vector<float>>& dense, StepGrads* grads);
  // Counts the steps the dense math computed again (worker.abft) up to `step`, whose every
  // attempt failed when `failed`. An error of kind kUnhealthyWorker once
  // worker.abft_max_detections of the last kAbftDetectionWindow steps were, or a step failed.
  absl::Status CountDetections(int64_t step, bool failed);
  absl::Status Evaluate(int64_t step);
  // A step whose push was acknowledged: recorded here and reported on the board.
  void Reported(int64_t step, int64_t samples, double loss, const PreparedBatch& batch);
  // The error of a partition that gave no sample to train.
  absl::Status NothingTrained() const;

  const JobSpec& spec_;
  const int worker_;
  PsClient* ps_;
  Dlrm* model_;
  ProgressBoard* board_;
  const std::atomic<bool>* stop_;
  const SparseOptimizerConfig sparse_optimizer_;  // what the servers apply, to replay it
  const DenseOptimizerConfig dense_optimizer_;
  std::unique_ptr<DataSource> source_;
  CpuDenseMath cpu_math_;
  DenseMath* math_;  // cpu_math_ unless UseDenseMath
  int64_t start_step_ = 0;
  int64_t start_position_ = 0;
  int64_t trained_step_ = 0;     // the last step reported
  int64_t trained_samples_ = 0;  // samples trained by then (start_position_ included)
  int64_t abft_seen_ = 0;                // math_->abft_detections() last counted
  int64_t abft_cleared_seen_ = 0;        // math_->abft_cleared() last logged
  std::deque<int64_t> abft_steps_;        // steps computed again, within the window
  int64_t read_epoch_ = -1;      // the data.epochs pass the reader was last seen in (logged)
};

}  // namespace ecps

#endif  // ECPS_WORKER_TRAINING_LOOP_H_

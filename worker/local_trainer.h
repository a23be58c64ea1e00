// LocalTrainer: trains a whole DLRM in-process on one thread, with no servers. It holds every
// table's row payloads (weights + sparse optimizer state) and the dense tensors with their
// optimizer state, and runs exactly the step the distributed worker runs:
//   read -> Dedupe -> PoolEmbeddings -> Dlrm::ForwardBackward -> AggregateRowGrads ->
//   ApplySparseUpdate per unique row (tables in order, rows sorted) ->
//   ApplyDenseUpdate per tensor (step = 1-based update count).
// It is the reference for equivalence tests against the distributed job and the "no
// servers" baseline for benchmarks. Rows are initialised lazily with InitSparseRow, so the
// values are the same as if every row had been initialised up front. Not thread-safe.
#ifndef ECPS_WORKER_LOCAL_TRAINER_H_
#define ECPS_WORKER_LOCAL_TRAINER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dlrm.h"
#include "kernels/optimizers.h"
#include "runtime/spec.h"
#include "worker/data.h"
#include "worker/step.h"

namespace ecps {

struct EvalResult {
  double auc = 0.5;
  double logloss = 0;
  int64_t samples = 0;
};

class LocalTrainer {
 public:
  // Uses spec.model, spec.optimizer, spec.data (partition 0 of 1, training split),
  // spec.job.seed (data stream, sparse and dense initialisation), spec.job.eval_samples, and
  // sets the process's OpenBLAS threads to spec.cluster.worker_threads (SetBlasThreads).
  // INVALID_ARGUMENT / NOT_FOUND as Dlrm::Create, the optimizer validators and
  // MakeDataSource report them.
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(const JobSpec& spec);

  // One step on the next data.batch_size samples; a finite data set starts over (next epoch)
  // when exhausted. Returns the batch's mean loss. Errors: the data source's.
  absl::StatusOr<float> Step();
  // Steps `steps` times.
  absl::Status Train(int64_t steps);
  // One step on a caller-supplied batch (benchmarks, equivalence tests); returns mean loss.
  float StepOnBatch(const Batch& batch);

  // AUC and logloss over the first job.eval_samples held-out samples (the same ones each
  // call). Does not change any parameter.
  absl::StatusOr<EvalResult> Evaluate();
  // Probabilities for a batch with the current parameters.
  void Predict(const Batch& batch, std::vector<float>* probs);

  // Payload of (table, row): embedding_dim weights then SparseStateFloats() state floats.
  const float* row_payload(int table, int64_t row) const;
  int payload_floats() const { return stride_; }
  const Dlrm& model() const { return *model_; }
  const std::vector<float>& dense_tensor(int i) const { return dense_[i]; }
  const std::vector<float>& dense_state(int i) const { return dense_state_[i]; }

  int64_t steps() const { return steps_; }
  int64_t samples() const { return samples_; }
  // Training samples per second over the time spent inside Step/StepOnBatch (data included
  // for Step).
  double samples_per_second() const;
  DataSource* data() { return data_.get(); }

 private:
  LocalTrainer() = default;
  float* MutableRow(int table, int64_t row) const;

  JobSpec spec_;
  SparseOptimizerConfig sparse_optimizer_;  // spec_.optimizer, as the kernels take it
  DenseOptimizerConfig dense_optimizer_;
  int dim_ = 0, stride_ = 0, num_sparse_ = 0;
  std::unique_ptr<Dlrm> model_;
  std::unique_ptr<DataSource> data_;
  // Tables: rows x stride floats, allocated uninitialised; initialised_[t][r] marks rows
  // already set by InitSparseRow. Mutable so that reading a row can initialise it.
  mutable std::vector<std::unique_ptr<float[]>> tables_;
  mutable std::vector<std::vector<uint8_t>> initialised_;
  std::vector<std::vector<float>> dense_, dense_state_, dense_grads_;
  std::vector<const float*> param_ptrs_;
  std::vector<float*> grad_ptrs_;

  // Step scratch (reused).
  Batch batch_;
  UniqueIds unique_;
  std::vector<std::vector<float>> rows_data_, row_grads_;
  std::vector<const float*> rows_ptrs_;
  std::vector<std::vector<float*>> payload_ptrs_;  // per table
  std::vector<float> pooled_, d_pooled_;

  int64_t steps_ = 0, samples_ = 0;
  double seconds_ = 0;
};

}  // namespace ecps

#endif  // ECPS_WORKER_LOCAL_TRAINER_H_
